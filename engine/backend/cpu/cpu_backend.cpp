// CPU forward pass for the llama / qwen2 / qwen3 family and the qwen35 hybrid (Gated DeltaNet
// and gated attention layers), driven by the arch flags and each layer's kind; MoE architectures
// (qwen3moe, qwen35moe) take the routed-expert FFN of moe_ops in every layer.
#include "backend/cpu/cpu_backend.h"

#include <cmath>
#include <vector>

#include "backend/cpu/delta_net_ops.h"
#include "backend/cpu/moe_ops.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/thread_pool.h"
#include "quant/quant.h"

namespace tandem {
namespace {

// K and V rows in host memory: [attention layer][slot][kv head], each row head_dim elements of
// cfg.type; and for hybrid models each sequence's recurrent state per DeltaNet layer (conv inputs,
// then S), with one checkpoint copy per sequence.
class cpu_kv_cache final : public kv_cache {
 public:
  cpu_kv_cache(const kv_cache_config& cfg, const hparams& hp, const recurrent_layout& rec)
      : kv_cache(cfg, rec),
        n_head_kv_(hp.n_head_kv),
        row_bytes_(row_bytes(cfg.type, hp.head_dim).value_or(0)),
        layer_bytes_(uint64_t{n_slots()} * hp.n_head_kv * row_bytes_),
        k_(layer_bytes_ * hp.n_attention_layers()),
        v_(layer_bytes_ * hp.n_attention_layers()),
        state_(uint64_t{cfg.n_seq_max} * rec.floats_per_seq()),
        saved_(state_.size()) {}

  uint64_t bytes() const override { return k_.size() + v_.size() + recurrent_bytes(); }
  // `layer` counts attention layers only.
  uint8_t* k_row(uint32_t layer, uint32_t slot, uint32_t kvh) { return k_.data() + off(layer, slot, kvh); }
  uint8_t* v_row(uint32_t layer, uint32_t slot, uint32_t kvh) { return v_.data() + off(layer, slot, kvh); }
  // The conv state of DeltaNet layer `dn` (counting DeltaNet layers only); S follows it.
  float* conv_state(int32_t seq, uint32_t dn) { return state_.data() + seq_offset(seq) + dn * layer_floats(); }
  float* ssm_state(int32_t seq, uint32_t dn) { return conv_state(seq, dn) + recurrent().conv_floats; }

 protected:
  status save_state(int32_t seq) override {
    std::copy_n(state_.data() + seq_offset(seq), recurrent().floats_per_seq(), saved_.data() + seq_offset(seq));
    return {};
  }
  status restore_state(int32_t seq) override {
    std::copy_n(saved_.data() + seq_offset(seq), recurrent().floats_per_seq(), state_.data() + seq_offset(seq));
    return {};
  }

 private:
  uint64_t off(uint32_t layer, uint32_t slot, uint32_t kvh) const {
    return layer * layer_bytes_ + (uint64_t{slot} * n_head_kv_ + kvh) * row_bytes_;
  }
  uint64_t layer_floats() const { return recurrent().conv_floats + recurrent().ssm_floats; }
  uint64_t seq_offset(int32_t seq) const { return uint64_t(seq) * recurrent().floats_per_seq(); }
  uint32_t n_head_kv_;
  uint64_t row_bytes_, layer_bytes_;
  std::vector<uint8_t> k_, v_;
  std::vector<float> state_, saved_;
};

// The recurrent state a hybrid model's sequences need (none for plain attention models).
recurrent_layout recurrent_of(const hparams& hp) {
  if (!hp.hybrid()) return {};
  const delta_net_shape dn = delta_net_of(hp);
  return {hp.n_delta_net_layers(), dn.conv_state_floats(), dn.ssm_state_floats()};
}

std::vector<float> to_floats(const gguf_tensor* t) {
  if (!t) return {};
  std::vector<float> out(t->n_elements);
  dequantize_row(t->type, t->data, out.data(), static_cast<int64_t>(t->n_elements));
  return out;
}

struct cpu_layer {
  std::vector<float> attn_norm, ffn_norm, q_norm, k_norm, bq, bk, bv;
  weight_view wq, wk, wv, wo, gate, up, down;
  // Gated DeltaNet layers.
  std::vector<float> dn_conv, dn_dt_bias, dn_a, dn_norm;
  weight_view dn_qkv, dn_gate, dn_beta, dn_alpha, dn_out;
  moe_weights moe;  // MoE layers (moe.n_expert > 0) in place of gate/up/down
  uint32_t index = 0;  // among the layers of its kind (the cache's attention or state index)
};

weight_view view_or_empty(const gguf_tensor* t) { return t ? make_weight_view(*t) : weight_view{}; }

// An MoE layer's router, experts and shared expert (empty for dense layers).
moe_weights moe_of(const layer_weights& lw, const hparams& hp) {
  moe_weights m;
  if (!hp.moe()) return m;
  m.router = make_weight_view(*lw.ffn_gate_inp);
  m.gate_exps = make_weight_view(*lw.ffn_gate_exps);
  m.up_exps = make_weight_view(*lw.ffn_up_exps);
  m.down_exps = make_weight_view(*lw.ffn_down_exps);
  m.n_expert = int(hp.n_expert);
  m.n_used = int(hp.n_expert_used);
  m.n_ff_exp = hp.n_ff_exp;
  m.renorm = hp.expert_weights_norm;
  if (lw.ffn_gate_inp_shexp) {
    m.shexp_gate = to_floats(lw.ffn_gate_inp_shexp);
    m.gate_shexp = make_weight_view(*lw.ffn_gate_shexp);
    m.up_shexp = make_weight_view(*lw.ffn_up_shexp);
    m.down_shexp = make_weight_view(*lw.ffn_down_shexp);
    m.n_ff_shexp = hp.n_ff_shexp;
  }
  return m;
}

// A sequence's consecutive rows of a batch (hybrid batches keep each sequence's tokens together).
struct seq_run {
  int64_t t0, n;
  int32_t seq, pos0;
};
std::vector<seq_run> runs_of(const batch& b) {
  std::vector<seq_run> runs;
  for (size_t t = 0; t < b.size(); ++t) {
    if (!runs.empty() && runs.back().seq == b.seq_ids[t]) ++runs.back().n;
    else runs.push_back({int64_t(t), 1, b.seq_ids[t], b.positions[t]});
  }
  return runs;
}

class cpu_backend final : public backend {
 public:
  cpu_backend(const model_desc& desc, unsigned n_threads) : desc_(desc), pool_(n_threads) {
    // "Upload": small vectors become float copies; matrices stay views of the mapping.
    uint32_t n_attn = 0, n_dn = 0;
    for (uint32_t il = 0; il < desc_.hp.n_layer; ++il) {
      const layer_weights& lw = desc_.layers[il];
      cpu_layer l;
      l.index = desc_.hp.kind(il) == layer_kind::attention ? n_attn++ : n_dn++;
      l.attn_norm = to_floats(lw.attn_norm);
      l.ffn_norm = to_floats(lw.ffn_norm);
      l.q_norm = to_floats(lw.q_norm);
      l.k_norm = to_floats(lw.k_norm);
      l.bq = to_floats(lw.bq);
      l.bk = to_floats(lw.bk);
      l.bv = to_floats(lw.bv);
      l.wq = view_or_empty(lw.wq);
      l.wk = view_or_empty(lw.wk);
      l.wv = view_or_empty(lw.wv);
      l.wo = view_or_empty(lw.wo);
      l.dn_conv = to_floats(lw.dn_conv);
      l.dn_dt_bias = to_floats(lw.dn_dt_bias);
      l.dn_a = to_floats(lw.dn_a);
      l.dn_norm = to_floats(lw.dn_norm);
      l.dn_qkv = view_or_empty(lw.dn_qkv);
      l.dn_gate = view_or_empty(lw.dn_gate);
      l.dn_beta = view_or_empty(lw.dn_beta);
      l.dn_alpha = view_or_empty(lw.dn_alpha);
      l.dn_out = view_or_empty(lw.dn_out);
      l.gate = view_or_empty(lw.ffn_gate);
      l.up = view_or_empty(lw.ffn_up);
      l.down = view_or_empty(lw.ffn_down);
      l.moe = moe_of(lw, desc_.hp);
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
    return std::unique_ptr<kv_cache>(std::make_unique<cpu_kv_cache>(*c, desc_.hp, recurrent_of(desc_.hp)));
  }

  status forward(const batch& b, kv_cache& cache, std::vector<float>& logits) override;

 private:
  void run_layer(uint32_t il, const batch& b, cpu_kv_cache& cache);
  void attention_block(uint32_t il, const batch& b, cpu_kv_cache& cache);
  void attention(uint32_t il, const batch& b, cpu_kv_cache& cache);
  void delta_net_block(uint32_t il, const batch& b, cpu_kv_cache& cache);
  void delta_net_run(const cpu_layer& L, const seq_run& r, cpu_kv_cache& cache);
  void ffn_block(uint32_t il, int64_t T);

  model_desc desc_;
  thread_pool pool_;
  std::vector<cpu_layer> layers_;
  weight_view embd_, output_;
  std::vector<float> output_norm_;
  // Scratch, sized per batch: x residual stream, xn normed, q/k/v, att, ffn.
  std::vector<float> x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_;
  // Hybrid scratch: attn_q's [q, gate] rows and the gate; DeltaNet projections, conv output,
  // gates and the rule's output.
  std::vector<float> qg_, qgate_, qkv_, conv_, z_, dn_a_, dn_b_, dn_g_, dn_beta_, dn_o_;
  moe_scratch moe_;
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
  if (!hp.moe()) {  // MoE layers size their own scratch
    gate_.resize(T * hp.n_ff);
    up_.resize(gate_.size());
  }
  if (hp.hybrid()) {
    const delta_net_shape dn = delta_net_of(hp);
    qg_.resize(2 * q_.size());
    qgate_.resize(q_.size());
    qkv_.resize(T * dn.conv_dim());
    conv_.resize(qkv_.size());
    z_.resize(T * dn.value_dim());
    dn_o_.resize(z_.size());
    for (auto* v : {&dn_a_, &dn_b_, &dn_g_, &dn_beta_}) v->resize(T * dn.n_v_heads);
  }
  for (size_t t = 0; t < T; ++t)
    dequantize_row(embd_.type, embd_.row(b.tokens[t]), x_.data() + t * E, static_cast<int64_t>(E));
  // The recurrent state is only trusted again once the whole step has run.
  const auto runs = runs_of(b);
  for (const auto& r : runs) cache->set_state_length(r.seq, kv_cache::k_state_unknown);
  for (uint32_t il = 0; il < hp.n_layer; ++il) run_layer(il, b, *cache);
  for (const auto& r : runs) cache->set_state_length(r.seq, cache->length(r.seq));

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
  if (desc_.hp.kind(il) == layer_kind::delta_net) delta_net_block(il, b, cache);
  else attention_block(il, b, cache);
  ffn_block(il, static_cast<int64_t>(b.size()));
}

void cpu_backend::attention_block(uint32_t il, const batch& b, cpu_kv_cache& cache) {
  const auto& hp = desc_.hp;
  const auto& L = layers_[il];
  const int64_t T = static_cast<int64_t>(b.size()), E = hp.n_embd;
  const int64_t D = hp.head_dim, QD = hp.n_head * D, KD = hp.n_head_kv * D;
  const bool gated = desc_.arch->flags.hybrid;
  for (int64_t t = 0; t < T; ++t)
    rms_norm(x_.data() + t * E, L.attn_norm.data(), xn_.data() + t * E, E, hp.rms_eps);
  if (gated) {
    // attn_q's rows hold [q(D), gate(D)] per head.
    matmul(pool_, L.wq, xn_.data(), T, qg_.data());
    for (int64_t t = 0; t < T; ++t)
      for (uint32_t h = 0; h < hp.n_head; ++h) {
        const float* src = qg_.data() + (t * hp.n_head + h) * 2 * D;
        std::copy_n(src, D, q_.data() + t * QD + h * D);
        std::copy_n(src + D, D, qgate_.data() + t * QD + h * D);
      }
  } else {
    matmul(pool_, L.wq, xn_.data(), T, q_.data());
  }
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
      quantize_kv_row(kt, k + h * D, cache.k_row(L.index, slot, h), D);
      quantize_kv_row(kt, v + h * D, cache.v_row(L.index, slot, h), D);
    }
  }
  attention(il, b, cache);
  if (gated)
    for (int64_t i = 0; i < T * QD; ++i) att_[i] *= 1.f / (1.f + std::exp(-qgate_[i]));
  matmul(pool_, L.wo, att_.data(), T, tmp_.data());
  for (int64_t i = 0; i < T * E; ++i) x_[i] += tmp_[i];
}

void cpu_backend::ffn_block(uint32_t il, int64_t T) {
  const auto& hp = desc_.hp;
  const auto& L = layers_[il];
  const int64_t E = hp.n_embd;
  for (int64_t t = 0; t < T; ++t)
    rms_norm(x_.data() + t * E, L.ffn_norm.data(), xn_.data() + t * E, E, hp.rms_eps);
  if (L.moe.n_expert > 0) {
    moe_ffn(pool_, L.moe, xn_.data(), T, E, tmp_.data(), moe_);
    for (int64_t i = 0; i < T * E; ++i) x_[i] += tmp_[i];
    return;
  }
  matmul(pool_, L.gate, xn_.data(), T, gate_.data());
  matmul(pool_, L.up, xn_.data(), T, up_.data());
  swiglu(gate_.data(), up_.data(), gate_.data(), T * hp.n_ff);
  matmul(pool_, L.down, gate_.data(), T, tmp_.data());
  for (int64_t i = 0; i < T * E; ++i) x_[i] += tmp_[i];
}

// x += ssm_out · (RMSNorm(o) · ssm_norm ⊙ SiLU(z)), o the gated delta rule over the conv'd q, k, v.
void cpu_backend::delta_net_block(uint32_t il, const batch& b, cpu_kv_cache& cache) {
  const auto& hp = desc_.hp;
  const auto& L = layers_[il];
  const delta_net_shape dn = delta_net_of(hp);
  const int64_t T = static_cast<int64_t>(b.size()), E = hp.n_embd;
  for (int64_t t = 0; t < T; ++t)
    rms_norm(x_.data() + t * E, L.attn_norm.data(), xn_.data() + t * E, E, hp.rms_eps);
  matmul(pool_, L.dn_qkv, xn_.data(), T, qkv_.data());
  matmul(pool_, L.dn_gate, xn_.data(), T, z_.data());
  matmul(pool_, L.dn_beta, xn_.data(), T, dn_b_.data());
  matmul(pool_, L.dn_alpha, xn_.data(), T, dn_a_.data());
  delta_net_gates(dn_a_.data(), dn_b_.data(), L.dn_a.data(), L.dn_dt_bias.data(), T, int(dn.n_v_heads),
                  dn_g_.data(), dn_beta_.data());
  for (const auto& r : runs_of(b)) delta_net_run(L, r, cache);
  rms_norm_gated(dn_o_.data(), L.dn_norm.data(), z_.data(), dn_o_.data(), T * dn.n_v_heads, int(dn.v_dim),
                 hp.rms_eps);
  matmul(pool_, L.dn_out, dn_o_.data(), T, tmp_.data());
  for (int64_t i = 0; i < T * E; ++i) x_[i] += tmp_[i];
}

// One sequence's rows through the conv and the delta rule, carrying its recurrent state.
void cpu_backend::delta_net_run(const cpu_layer& L, const seq_run& r, cpu_kv_cache& cache) {
  const delta_net_shape dn = delta_net_of(desc_.hp);
  const int64_t C = dn.conv_dim();
  float* conv_state = cache.conv_state(r.seq, L.index);
  float* S = cache.ssm_state(r.seq, L.index);
  if (r.pos0 == 0) {  // a fresh sequence: whatever the slot held before is not its state
    std::fill_n(conv_state, dn.conv_state_floats(), 0.f);
    std::fill_n(S, dn.ssm_state_floats(), 0.f);
  }
  float* u = conv_.data() + r.t0 * C;
  causal_conv1d_silu(qkv_.data() + r.t0 * C, C, L.dn_conv.data(), r.n, int(C), int(dn.kernel), conv_state, u);
  // The q and k heads (2·Hk consecutive heads at the start of each row) are L2-normed in place.
  for (int64_t t = 0; t < r.n; ++t) l2_norm_rows(u + t * C, 2 * dn.n_k_heads, int(dn.k_dim), dn.k_dim, 1e-6f);
  delta_rule_args a;
  a.q = u;
  a.k = u + dn.key_dim();
  a.qk_stride = C;
  a.v = u + 2 * dn.key_dim();
  a.v_stride = C;
  a.g = dn_g_.data() + r.t0 * dn.n_v_heads;
  a.beta = dn_beta_.data() + r.t0 * dn.n_v_heads;
  a.T = r.n;
  a.Hk = int(dn.n_k_heads), a.Hv = int(dn.n_v_heads), a.dk = int(dn.k_dim), a.dv = int(dn.v_dim);
  a.S = S;
  a.out = dn_o_.data() + r.t0 * dn.value_dim();
  // Long runs (prefill) take the chunked form; both are tested equal.
  if (r.n >= 64) gated_delta_rule_chunked(a);
  else gated_delta_rule_recurrent(a);
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
        k_rows[j] = cache.k_row(layers_[il].index, slot, kvh);
        v_rows[j] = cache.v_row(layers_[il].index, slot, kvh);
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
