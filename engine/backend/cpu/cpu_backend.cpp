// CPU forward pass for the llama / qwen2 / qwen3 family, driven by the arch flags.
#include "backend/cpu/cpu_backend.h"

#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/thread_pool.h"
#include "quant/quant.h"

namespace tandem {
namespace {

// K and V rows in host memory: [layer][slot][kv head], each row head_dim elements of cfg.type.
class cpu_kv_cache final : public kv_cache {
 public:
  cpu_kv_cache(const kv_cache_config& cfg, const hparams& hp)
      : kv_cache(cfg),
        n_head_kv_(hp.n_head_kv),
        row_bytes_(row_bytes(cfg.type, hp.head_dim).value_or(0)),
        layer_bytes_(uint64_t{n_slots()} * hp.n_head_kv * row_bytes_),
        k_(layer_bytes_ * hp.n_layer),
        v_(layer_bytes_ * hp.n_layer) {}

  uint64_t bytes() const override { return k_.size() + v_.size(); }
  uint8_t* k_row(uint32_t layer, uint32_t slot, uint32_t kvh) { return k_.data() + off(layer, slot, kvh); }
  uint8_t* v_row(uint32_t layer, uint32_t slot, uint32_t kvh) { return v_.data() + off(layer, slot, kvh); }

 private:
  uint64_t off(uint32_t layer, uint32_t slot, uint32_t kvh) const {
    return layer * layer_bytes_ + (uint64_t{slot} * n_head_kv_ + kvh) * row_bytes_;
  }
  uint32_t n_head_kv_;
  uint64_t row_bytes_, layer_bytes_;
  std::vector<uint8_t> k_, v_;
};

std::vector<float> to_floats(const gguf_tensor* t) {
  if (!t) return {};
  std::vector<float> out(t->n_elements);
  dequantize_row(t->type, t->data, out.data(), static_cast<int64_t>(t->n_elements));
  return out;
}

struct cpu_layer {
  std::vector<float> attn_norm, ffn_norm, q_norm, k_norm, bq, bk, bv;
  weight_view wq, wk, wv, wo, gate, up, down;
};

class cpu_backend final : public backend {
 public:
  cpu_backend(const model_desc& desc, unsigned n_threads) : desc_(desc), pool_(n_threads) {
    // "Upload": small vectors become float copies; matrices stay views of the mapping.
    for (const auto& lw : desc_.layers) {
      cpu_layer l;
      l.attn_norm = to_floats(lw.attn_norm);
      l.ffn_norm = to_floats(lw.ffn_norm);
      l.q_norm = to_floats(lw.q_norm);
      l.k_norm = to_floats(lw.k_norm);
      l.bq = to_floats(lw.bq);
      l.bk = to_floats(lw.bk);
      l.bv = to_floats(lw.bv);
      l.wq = make_weight_view(*lw.wq);
      l.wk = make_weight_view(*lw.wk);
      l.wv = make_weight_view(*lw.wv);
      l.wo = make_weight_view(*lw.wo);
      l.gate = make_weight_view(*lw.ffn_gate);
      l.up = make_weight_view(*lw.ffn_up);
      l.down = make_weight_view(*lw.ffn_down);
      layers_.push_back(std::move(l));
    }
    embd_ = make_weight_view(*desc_.token_embd);
    output_ = make_weight_view(*desc_.output);
    output_norm_ = to_floats(desc_.output_norm);
  }

  std::string_view name() const override { return "cpu"; }
  const model_desc& model() const override { return desc_; }

  result<std::unique_ptr<kv_cache>> make_cache(const kv_cache_config& cfg) override {
    auto c = normalize_kv_config(cfg);
    if (!c) return c.err();
    if (!row_bytes(c->type, desc_.hp.head_dim))
      return make_error("KV cache type ", type_name(c->type), " needs the head size (",
                        desc_.hp.head_dim, ") to be a multiple of its block size");
    return std::unique_ptr<kv_cache>(std::make_unique<cpu_kv_cache>(*c, desc_.hp));
  }

  status forward(const batch& b, kv_cache& cache, std::vector<float>& logits) override;

 private:
  void run_layer(uint32_t il, const batch& b, cpu_kv_cache& cache);
  void attention(uint32_t il, const batch& b, cpu_kv_cache& cache);

  model_desc desc_;
  thread_pool pool_;
  std::vector<cpu_layer> layers_;
  weight_view embd_, output_;
  std::vector<float> output_norm_;
  // Scratch, sized per batch: x residual stream, xn normed, q/k/v, att, ffn.
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_;
};

status cpu_backend::forward(const batch& b, kv_cache& cache_base, std::vector<float>& logits) {
  auto* cache = dynamic_cast<cpu_kv_cache*>(&cache_base);
  if (!cache) return make_error("the KV cache was not made by the CPU backend");
  TANDEM_TRY(reserve_batch(b, *cache, desc_.hp.n_vocab));
  const auto& hp = desc_.hp;
  const size_t T = b.size(), E = hp.n_embd;
  x_.resize(T * E);
  xn_.resize(T * E);
  tmp_.resize(T * E);
  q_.resize(T * hp.n_head * hp.head_dim);
  att_.resize(q_.size());
  k_.resize(T * hp.n_head_kv * hp.head_dim);
  v_.resize(k_.size());
  gate_.resize(T * hp.n_ff);
  up_.resize(gate_.size());
  for (size_t t = 0; t < T; ++t)
    dequantize_row(embd_.type, embd_.row(b.tokens[t]), x_.data() + t * E, static_cast<int64_t>(E));
  for (uint32_t il = 0; il < hp.n_layer; ++il) run_layer(il, b, *cache);

  // Only rows that want logits pay for the output head.
  size_t n_out = 0;
  for (size_t t = 0; t < T; ++t) {
    if (!b.want_logits[t]) continue;
    rms_norm(x_.data() + t * E, output_norm_.data(), xn_.data() + n_out * E,
             static_cast<int64_t>(E), hp.rms_eps);
    ++n_out;
  }
  logits.resize(n_out * hp.n_vocab);
  if (n_out) matmul(pool_, output_, xn_.data(), static_cast<int64_t>(n_out), logits.data());
  return {};
}

void cpu_backend::run_layer(uint32_t il, const batch& b, cpu_kv_cache& cache) {
  const auto& hp = desc_.hp;
  const auto& L = layers_[il];
  const int64_t T = static_cast<int64_t>(b.size()), E = hp.n_embd;
  const int64_t D = hp.head_dim, QD = hp.n_head * D, KD = hp.n_head_kv * D;
  for (int64_t t = 0; t < T; ++t)
    rms_norm(x_.data() + t * E, L.attn_norm.data(), xn_.data() + t * E, E, hp.rms_eps);
  matmul(pool_, L.wq, xn_.data(), T, q_.data());
  matmul(pool_, L.wk, xn_.data(), T, k_.data());
  matmul(pool_, L.wv, xn_.data(), T, v_.data());
  const bool neox = desc_.arch->flags.rope == rope_style::neox;
  for (int64_t t = 0; t < T; ++t) {
    float* q = q_.data() + t * QD;
    float* k = k_.data() + t * KD;
    float* v = v_.data() + t * KD;
    if (!L.bq.empty()) {
      for (int64_t i = 0; i < QD; ++i) q[i] += L.bq[i];
      for (int64_t i = 0; i < KD; ++i) k[i] += L.bk[i];
      for (int64_t i = 0; i < KD; ++i) v[i] += L.bv[i];
    }
    if (!L.q_norm.empty()) {
      for (uint32_t h = 0; h < hp.n_head; ++h) rms_norm(q + h * D, L.q_norm.data(), q + h * D, D, hp.rms_eps);
      for (uint32_t h = 0; h < hp.n_head_kv; ++h) rms_norm(k + h * D, L.k_norm.data(), k + h * D, D, hp.rms_eps);
    }
    const auto style = neox ? rope_style::neox : rope_style::normal;
    rope(q, int(hp.n_head), int(D), int(hp.rope_dim), b.positions[t], hp.rope_theta, style);
    rope(k, int(hp.n_head_kv), int(D), int(hp.rope_dim), b.positions[t], hp.rope_theta, style);
    const uint32_t slot = cache.slot(b.seq_ids[t], uint32_t(b.positions[t]));
    const ggml_type kt = cache.config().type;
    for (uint32_t h = 0; h < hp.n_head_kv; ++h) {
      quantize_kv_row(kt, k + h * D, cache.k_row(il, slot, h), D);
      quantize_kv_row(kt, v + h * D, cache.v_row(il, slot, h), D);
    }
  }
  attention(il, b, cache);
  matmul(pool_, L.wo, att_.data(), T, tmp_.data());
  for (int64_t i = 0; i < T * E; ++i) x_[i] += tmp_[i];

  for (int64_t t = 0; t < T; ++t)
    rms_norm(x_.data() + t * E, L.ffn_norm.data(), xn_.data() + t * E, E, hp.rms_eps);
  matmul(pool_, L.gate, xn_.data(), T, gate_.data());
  matmul(pool_, L.up, xn_.data(), T, up_.data());
  swiglu(gate_.data(), up_.data(), gate_.data(), T * hp.n_ff);
  matmul(pool_, L.down, gate_.data(), T, tmp_.data());
  for (int64_t i = 0; i < T * E; ++i) x_[i] += tmp_[i];
}

void cpu_backend::attention(uint32_t il, const batch& b, cpu_kv_cache& cache) {
  const auto& hp = desc_.hp;
  const int D = int(hp.head_dim);
  const uint32_t group = hp.n_head / hp.n_head_kv;  // query heads per KV head (GQA)
  const float scale = 1.f / std::sqrt(float(D));
  const ggml_type kt = cache.config().type;
  const size_t n_items = b.size() * hp.n_head;
  pool_.parallel_for(n_items, 1, [&](size_t begin, size_t end) {
    std::vector<const uint8_t*> k_rows, v_rows;
    std::vector<float> scores, tmp(D);
    for (size_t i = begin; i < end; ++i) {
      const size_t t = i / hp.n_head;
      const uint32_t h = uint32_t(i % hp.n_head), kvh = h / group;
      // Causal: a token sees its own sequence's positions 0..pos, all already in the cache.
      const uint32_t n_kv = uint32_t(b.positions[t]) + 1;
      k_rows.resize(n_kv);
      v_rows.resize(n_kv);
      scores.resize(n_kv);
      for (uint32_t j = 0; j < n_kv; ++j) {
        const uint32_t slot = cache.slot(b.seq_ids[t], j);
        k_rows[j] = cache.k_row(il, slot, kvh);
        v_rows[j] = cache.v_row(il, slot, kvh);
      }
      const float* q = q_.data() + (t * hp.n_head + h) * D;
      float* out = att_.data() + (t * hp.n_head + h) * D;
      attend_head(q, k_rows.data(), v_rows.data(), kt, n_kv, D, scale, scores.data(), tmp.data(), out);
    }
  });
}

}  // namespace

result<std::unique_ptr<backend>> make_cpu_backend(const model_desc& desc,
                                                  const cpu_backend_options& opt) {
  if (!desc.arch || !desc.token_embd || !desc.output || desc.layers.size() != desc.hp.n_layer)
    return make_error("CPU backend: the model description is not bound");
  return std::unique_ptr<backend>(std::make_unique<cpu_backend>(desc, opt.n_threads));
}

}  // namespace tandem
