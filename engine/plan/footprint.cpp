// The bytes one device needs for its share of the model. Each formula restates an allocation of
// the CUDA backend (cuda_weights.cpp: one 256-byte-aligned matrix buffer and one float32 vector
// pack; cuda_backend.cpp: ensure_scratch, weight_tile_, the attention buffers, cuda_kv_cache,
// logits), applied to the device's shard; with the whole model on one device they are that
// backend's allocations exactly. Keep both in step when either changes. Hybrid (qwen35) models
// restate cuda_kv_cache's state and checkpoint buffers and ensure_hybrid_scratch
// (cuda_hybrid_block.cpp); no backend runs a split hybrid model yet, so the DeltaNet cut of a
// tensor split is this plan's own layout (delta_net_value_runs).
#include <algorithm>
#include <functional>
#include <numeric>
#include <set>

#include "core/exchange_layout.h"
#include "plan/memory_plan.h"

namespace tandem {
namespace {

constexpr uint64_t k_matrix_align = 256;           // cuda_weights.cpp k_align
constexpr uint64_t k_vector_align_floats = 64;     // the same 256 bytes, in floats
constexpr uint64_t k_weight_tile_elems = 64ull << 20;   // cuda_backend.cpp k_weight_tile_elems
constexpr uint64_t k_paged_max_splits = 128;    // kernels/attention.h: splits of one (token, head) at most
constexpr uint64_t k_paged_split_slots = 32768;  // kernels/attention.h: split partials per launch at most
constexpr uint64_t k_max_kv_slots = 0x7fffffffull;      // normalize_kv_config's limit
constexpr uint64_t k_block_bucket = 32;                 // make_plan(): block-table width rounding
constexpr uint64_t k_matvec_tokens = 8;                 // kernels/matvec.h k_matvec_max_tokens
constexpr uint64_t k_dn_chunk = 64;        // kernels/delta_net_chunked.cu k_chunk
constexpr uint64_t k_dn_chunked_min = 128;  // cuda_hybrid_block.cpp k_dn_chunked_min_tokens

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

using run_list = std::vector<std::pair<uint64_t, uint64_t>>;

uint64_t run_total(const run_list& runs) {
  uint64_t n = 0;
  for (const auto& [b, e] : runs) n += e - b;
  return n;
}

// Accumulates one device's weight buffers the way upload_weights lays them out. A shard may be
// several runs of rows or columns (a DeltaNet cut's strided value heads): one buffer, one
// placement per run.
class weight_layout {
 public:
  weight_layout(int device, std::vector<tensor_placement>* out) : device_(device), out_(out) {}

  status matrix(const gguf_tensor* t, placement_kind kind, uint64_t begin, uint64_t end) {
    return matrix_runs(t, kind, {{begin, end}});
  }

  status matrix_runs(const gguf_tensor* t, placement_kind kind, const run_list& runs) {
    const bool sliced = kind == placement_kind::rows || kind == placement_kind::columns;
    if (!t || (sliced && run_total(runs) == 0)) return {};
    // The tied head shares token_embd's copy.
    if (!matrices_.insert({t, sliced ? runs.front().first : 0}).second) return {};
    const uint64_t n_in = t->dims[0], n_out = t->n_elements / t->dims[0];
    uint64_t bytes = t->n_bytes, elems = t->n_elements;
    std::vector<uint64_t> run_bytes;
    if (kind == placement_kind::rows) {
      const uint64_t rb = row_bytes(t->type, n_in).value_or(0);
      for (const auto& [b, e] : runs) run_bytes.push_back((e - b) * rb);
      elems = run_total(runs) * n_in;
    } else if (kind == placement_kind::columns) {
      const uint32_t block = type_info(t->type).block_size;
      for (const auto& [b, e] : runs) {
        auto rb = row_bytes(t->type, e - b);
        if (b % block != 0 || !rb)
          return make_error("tensor ", t->name, " (", type_name(t->type), ", blocks of ", block,
                            ") cannot be cut at input columns ", b, "..", e,
                            ": cuts must fall on whole blocks (try other ratios, or split layer)");
        run_bytes.push_back(n_out * *rb);
      }
      elems = n_out * run_total(runs);
    }
    if (sliced) bytes = std::accumulate(run_bytes.begin(), run_bytes.end(), uint64_t{0});
    matrix_bytes_ = align_up(matrix_bytes_ + bytes, k_matrix_align);
    file_bytes_ += bytes;
    largest_ = std::max(largest_, elems);
    if (!sliced) record(t, kind, 0, 0, bytes);
    for (size_t i = 0; sliced && i < runs.size(); ++i)
      if (runs[i].second > runs[i].first) record(t, kind, runs[i].first, runs[i].second, run_bytes[i]);
    return {};
  }

  // Norm weights, biases and other float vectors: float32 on the device, packed at 256-byte
  // offsets. columns: elements of a 1-d tensor; rows: rows of dims[0] elements (conv channels).
  status vector(const gguf_tensor* t, placement_kind kind, uint64_t begin = 0, uint64_t end = 0) {
    return vector_runs(t, kind, {{begin, end}});
  }

  status vector_runs(const gguf_tensor* t, placement_kind kind, const run_list& runs) {
    const bool sliced = kind == placement_kind::rows || kind == placement_kind::columns;
    if (!t || (sliced && run_total(runs) == 0) || !vectors_.insert(t).second) return {};
    uint64_t n = t->n_elements, bytes = t->n_bytes;
    const uint64_t row = kind == placement_kind::rows ? t->dims[0] : 1;
    std::vector<uint64_t> run_bytes;
    for (size_t i = 0; sliced && i < runs.size(); ++i) {
      auto rb = row_bytes(t->type, (runs[i].second - runs[i].first) * row);
      if (!rb)
        return make_error("tensor ", t->name, " cannot be cut at elements ", runs[i].first * row, "..",
                          runs[i].second * row);
      run_bytes.push_back(*rb);
    }
    if (sliced) {
      n = run_total(runs) * row;
      bytes = std::accumulate(run_bytes.begin(), run_bytes.end(), uint64_t{0});
    }
    vector_floats_ = align_up(vector_floats_, k_vector_align_floats) + n;
    file_bytes_ += bytes;
    if (!sliced) record(t, kind, 0, 0, bytes);
    for (size_t i = 0; sliced && i < runs.size(); ++i)
      if (runs[i].second > runs[i].first) record(t, kind, runs[i].first, runs[i].second, run_bytes[i]);
    return {};
  }

  void note_output_head(const gguf_tensor* out) { largest_ = std::max<uint64_t>(largest_, out->dims[0] * 256); }

  uint64_t matrix_bytes() const { return matrix_bytes_; }
  uint64_t vector_bytes() const { return vector_floats_ * sizeof(float); }
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t largest_elems() const { return largest_; }

 private:
  void record(const gguf_tensor* t, placement_kind kind, uint64_t begin, uint64_t end, uint64_t bytes) {
    if (out_) out_->push_back({t, device_, kind, begin, end, bytes});
  }

  int device_;
  std::vector<tensor_placement>* out_;
  std::set<std::pair<const gguf_tensor*, uint64_t>> matrices_;
  std::set<const gguf_tensor*> vectors_;
  uint64_t matrix_bytes_ = 0, vector_floats_ = 0, file_bytes_ = 0, largest_ = 0;
};

// An attention layer's tensors as the share cuts them: whole when the share has all heads.
// Hybrid attention (gated) has 2·D rows of attn_q per query head: [q, gate].
status add_attention(const model_desc& desc, const layer_weights& l, const device_share& s, placement_kind norm_kind,
                     weight_layout& w) {
  const auto& hp = desc.hp;
  const uint64_t D = hp.head_dim, grp = hp.n_head / hp.n_head_kv, qrows = desc.arch->flags.hybrid ? 2 : 1;
  const bool all_heads = s.kv_head_begin == 0 && s.kv_head_end == hp.n_head_kv;
  const uint64_t q0 = s.kv_head_begin * grp * D, q1 = s.kv_head_end * grp * D;
  const uint64_t k0 = s.kv_head_begin * D, k1 = s.kv_head_end * D;
  const auto rows = all_heads ? placement_kind::whole : placement_kind::rows;
  const auto cols = all_heads ? placement_kind::whole : placement_kind::columns;
  TANDEM_TRY(w.matrix(l.wq, rows, q0 * qrows, q1 * qrows));
  TANDEM_TRY(w.matrix(l.wk, rows, k0, k1));
  TANDEM_TRY(w.matrix(l.wv, rows, k0, k1));
  TANDEM_TRY(w.matrix(l.wo, cols, q0, q1));  // row-parallel: this device's heads' inputs
  TANDEM_TRY(w.vector(l.q_norm, norm_kind));  // one head's weights, shared by all heads
  TANDEM_TRY(w.vector(l.k_norm, norm_kind));
  TANDEM_TRY(w.vector(l.bq, cols, q0, q1));
  TANDEM_TRY(w.vector(l.bk, cols, k0, k1));
  return w.vector(l.bv, cols, k0, k1);
}

// A DeltaNet layer's tensors for the share's key heads and the value heads that go with them:
// rows of attn_qkv (q, k of its key heads; v of its value heads), of attn_gate, ssm_beta and
// ssm_alpha; input columns of ssm_out; conv channels (rows of ssm_conv1d) and per-head vectors.
status add_delta_net(const model_desc& desc, const layer_weights& l, const device_share& s, placement_kind norm_kind,
                     weight_layout& w) {
  const auto& hp = desc.hp;
  const delta_net_shape dn = delta_net_of(hp);
  const bool all = s.dn_head_begin == 0 && s.dn_head_end == dn.n_k_heads;
  const auto rows = all ? placement_kind::whole : placement_kind::rows;
  const auto cols = all ? placement_kind::whole : placement_kind::columns;
  const run_list heads = delta_net_value_runs(hp, s);
  const uint64_t kd = dn.k_dim, key_dim = dn.key_dim();
  run_list values, channels = {{s.dn_head_begin * kd, s.dn_head_end * kd},
                               {key_dim + s.dn_head_begin * kd, key_dim + s.dn_head_end * kd}};
  for (const auto& [b, e] : heads) {
    values.push_back({b * dn.v_dim, e * dn.v_dim});
    channels.push_back({2 * key_dim + b * dn.v_dim, 2 * key_dim + e * dn.v_dim});
  }
  TANDEM_TRY(w.matrix_runs(l.dn_qkv, rows, channels));
  TANDEM_TRY(w.matrix_runs(l.dn_gate, rows, values));
  TANDEM_TRY(w.matrix_runs(l.dn_beta, rows, heads));
  TANDEM_TRY(w.matrix_runs(l.dn_alpha, rows, heads));
  TANDEM_TRY(w.matrix_runs(l.dn_out, cols, values));
  TANDEM_TRY(w.vector_runs(l.dn_conv, rows, channels));
  TANDEM_TRY(w.vector_runs(l.dn_dt_bias, cols, heads));
  TANDEM_TRY(w.vector_runs(l.dn_a, cols, heads));
  return w.vector(l.dn_norm, norm_kind);  // one head's weights, shared by all heads
}

// One layer's tensors as the share cuts them, in upload_weights' order: the two norms, the mixer
// of the layer's kind (when the share has any of its heads), the FFN (when it has columns). A MoE
// layer's routed experts go to `experts`.
status add_layer(const model_desc& desc, uint32_t il, const device_share& s, placement_kind norm_kind,
                 weight_layout& w, weight_layout& experts) {
  const auto& hp = desc.hp;
  const layer_weights& l = desc.layers[il];
  TANDEM_TRY(w.vector(l.attn_norm, norm_kind));
  TANDEM_TRY(w.vector(l.ffn_norm, norm_kind));
  if (hp.kind(il) == layer_kind::attention) {
    if (s.kv_head_end > s.kv_head_begin) TANDEM_TRY(add_attention(desc, l, s, norm_kind, w));
  } else if (s.dn_head_end > s.dn_head_begin) {
    TANDEM_TRY(add_delta_net(desc, l, s, norm_kind, w));
  }
  if (hp.moe()) {
    // Whole on the layer's device (make_memory_plan refuses a tensor split of MoE models): the
    // router and shared expert with the other weights, the routed experts in their own buffer.
    TANDEM_TRY(w.matrix(l.ffn_gate_inp, placement_kind::whole, 0, 0));
    TANDEM_TRY(w.vector(l.ffn_gate_inp_shexp, norm_kind));
    for (const gguf_tensor* t : {l.ffn_gate_shexp, l.ffn_up_shexp, l.ffn_down_shexp})
      TANDEM_TRY(w.matrix(t, placement_kind::whole, 0, 0));
    for (const gguf_tensor* t : {l.ffn_gate_exps, l.ffn_up_exps, l.ffn_down_exps})
      TANDEM_TRY(experts.matrix(t, placement_kind::whole, 0, 0));
    return {};
  }
  const bool all_ffn = s.ffn_begin == 0 && s.ffn_end == hp.n_ff;
  const auto frows = all_ffn ? placement_kind::whole : placement_kind::rows;
  const auto fcols = all_ffn ? placement_kind::whole : placement_kind::columns;
  TANDEM_TRY(w.matrix(l.ffn_gate, frows, s.ffn_begin, s.ffn_end));
  TANDEM_TRY(w.matrix(l.ffn_up, frows, s.ffn_begin, s.ffn_end));
  return w.matrix(l.ffn_down, fcols, s.ffn_begin, s.ffn_end);
}

// kernels/matvec.cu matvec_work_bytes: the int8 copy of x (16-byte padded) and its block scales.
uint64_t matvec_work_bytes(uint64_t n_in, uint64_t n_tok) {
  return (n_in * n_tok + 15) / 16 * 16 + (n_in + 31) / 32 * n_tok * 8;
}

uint64_t kv_row_bytes(ggml_type type, uint64_t heads, uint64_t head_dim) {
  if (type == ggml_type::f32) return heads * head_dim * 4;
  if (type == ggml_type::f16) return heads * head_dim * 2;
  return heads * row_bytes(type, head_dim).value_or(0);
}

}  // namespace

uint64_t device_overhead_bytes(const plan_options& opt, int n_used_devices) {
  uint64_t b = opt.rt.cuda_context_bytes + opt.rt.cublas_workspace_bytes;
  // Only a tensor split exchanges partial sums; a layer split hands over with peer copies.
  if (n_used_devices > 1 && opt.split == split_mode::tensor) {
    const uint64_t g = opt.rt.alloc_granularity ? opt.rt.alloc_granularity : 1;
    b += align_up(exchange_box_bytes(n_used_devices), g) + align_up(exchange_counter_bytes(), g) + opt.rt.nccl_bytes;
  }
  return b;
}

std::vector<std::pair<uint64_t, uint64_t>> delta_net_value_runs(const hparams& hp, const device_share& s) {
  const delta_net_shape dn = delta_net_of(hp);
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  if (s.dn_head_end <= s.dn_head_begin || dn.n_k_heads == 0) return runs;
  if (s.dn_head_begin == 0 && s.dn_head_end == dn.n_k_heads) return {{0, dn.n_v_heads}};
  for (uint64_t j = 0; j < dn.n_v_heads / dn.n_k_heads; ++j)
    runs.push_back({j * dn.n_k_heads + s.dn_head_begin, j * dn.n_k_heads + s.dn_head_end});
  return runs;
}

namespace {

// The sizes of one device's share that its buffers are made from. Like the backend's hp_, the
// widths are the share's heads and columns whenever the device has any layer: ensure_scratch
// sizes every buffer for them whatever kinds its layers are.
struct share_dims {
  uint64_t n_attn = 0, n_dn = 0;       // attention / DeltaNet layers in its range
  uint64_t kv_heads = 0, q_heads = 0;  // attention heads of its share
  uint64_t QD = 0, KD = 0, F = 0;      // per-token widths (0 without layers)
  uint64_t dn_k = 0, dn_v = 0;         // DeltaNet key / value heads (hybrid models)
  uint64_t dk = 0, dv = 0;             // and their sizes
  uint64_t C = 0, V = 0;               // DeltaNet conv channels and value width
};

share_dims dims_of(const hparams& hp, const device_share& s) {
  share_dims d;
  for (uint32_t il = s.layer_begin; il < s.layer_end; ++il)
    (hp.kind(il) == layer_kind::attention ? d.n_attn : d.n_dn)++;
  d.kv_heads = s.kv_head_end - s.kv_head_begin;
  if (s.layer_end > s.layer_begin) {
    d.q_heads = d.kv_heads * (hp.n_head / hp.n_head_kv);
    d.QD = d.q_heads * hp.head_dim;
    d.KD = d.kv_heads * hp.head_dim;
    d.F = hp.moe() ? 0 : s.ffn_end - s.ffn_begin;  // MoE layers: moe_activation_bytes
  }
  if (hp.hybrid() && s.layer_end > s.layer_begin) {
    const delta_net_shape dn = delta_net_of(hp);
    d.dn_k = s.dn_head_end - s.dn_head_begin;
    d.dn_v = d.dn_k * (dn.n_v_heads / dn.n_k_heads);
    d.C = 2 * d.dn_k * dn.k_dim + d.dn_v * dn.v_dim;
    d.V = d.dn_v * dn.v_dim;
    d.dk = dn.k_dim, d.dv = dn.v_dim;
  }
  return d;
}

// The MoE FFN's per-batch buffers (cuda_backend::ensure_moe_scratch): router logits
// (T·n_expert), the k selected ids and weights per token, the gathered inputs and expert outputs
// of the T·k (token, expert) pairs, their gate and up rows (T·k·n_ff_exp each), and the shared
// expert's gate and up.
uint64_t moe_activation_bytes(const hparams& hp, uint64_t T, bool has_layers,
                              const std::function<uint64_t(uint64_t)>& alloc) {
  if (!hp.moe() || !has_layers) return 0;
  const uint64_t f = sizeof(float), k = hp.n_expert_used, E = hp.n_embd;
  return alloc(T * hp.n_expert * f) + 2 * alloc(T * k * 4) + 2 * alloc(T * k * E * f) +
         2 * alloc(T * k * hp.n_ff_exp * f) + 2 * alloc(T * hp.n_ff_shexp * f);
}

// ensure_scratch for n_batch tokens with the device's heads and FFN columns, the packed per-batch
// integers, and the output device's logits. Hybrid models add (ensure_hybrid_scratch) gated
// attention's [q, gate] rows and gate, and the DeltaNet's qkv, conv output, z, rule output, gated
// norm output and the per-head gate inputs (b sized for b and a side by side, a), and four ints
// per DeltaNet run.
uint64_t activation_bytes(const model_desc& desc, const plan_options& opt, const device_share& s,
                          const share_dims& d, uint64_t blocks_per_seq,
                          const std::function<uint64_t(uint64_t)>& alloc) {
  const auto& hp = desc.hp;
  const uint64_t T = opt.n_batch, E = hp.n_embd, f = sizeof(float), L = opt.n_logits;
  uint64_t act = 3 * alloc(T * E * f) + 2 * alloc(T * d.QD * f) + 2 * alloc(T * d.KD * f) + 2 * alloc(T * d.F * f) +
                 alloc(T * std::max({E, d.QD, d.F, d.V}) * sizeof(uint16_t));
  act += alloc(T * hp.rope_dim * f);  // a prefill pass's RoPE rotations
  if (desc.hp.hybrid()) act += alloc(T * 2 * d.QD * f) + alloc(T * d.QD * f);
  act += 2 * alloc(T * d.C * f) + 3 * alloc(T * d.V * f) + alloc(2 * T * d.dn_v * f) + alloc(T * d.dn_v * f);
  // Batches long enough for the chunked delta rule: its workspace (kernels/delta_net_chunked.cu
  // work_floats: normed q and k, W, U, the masked in-chunk scores and the decays).
  if (d.dn_k > 0 && T >= k_dn_chunked_min)
    act += alloc(T * (2 * d.dn_k * d.dk + d.dn_v * (d.dk + d.dv + k_dn_chunk + 1)) * f);
  // The packed per-batch integers: tokens, positions (twice), slots, tables, outputs, block tables.
  const uint64_t table_width = align_up(std::max<uint64_t>(1, blocks_per_seq), k_block_bucket);
  const uint64_t runs = std::min<uint64_t>(opt.n_seqs, T);
  act += alloc((5 * T + L + runs * table_width + (desc.hp.hybrid() ? 4 * runs : 0)) * 4);
  if (s.output) act += alloc(L * E * f) + alloc(L * hp.n_vocab * f) + alloc(L * sizeof(int32_t));
  return act + moe_activation_bytes(hp, T, s.layer_end > s.layer_begin, alloc);
}

// The fp16 weight tile, the mat-vec's int8 x and the paged attention's partials (allocated by
// prepare). Prefill attention (the flash kernel) works in shared memory: no buffer of its own.
uint64_t workspace_bytes(const model_desc& desc, const plan_options& opt, const share_dims& d, uint64_t largest,
                         const std::function<uint64_t(uint64_t)>& alloc) {
  const auto& hp = desc.hp;
  const uint64_t T = opt.n_batch, E = hp.n_embd, D = hp.head_dim;
  uint64_t ws = alloc(std::min(largest, k_weight_tile_elems) * sizeof(uint16_t));
  ws += alloc(matvec_work_bytes(std::max({E, d.QD, d.F, d.V}), std::min(T, k_matvec_tokens)));  // matvec_work_
  if (d.q_heads == 0) return ws;
  ws += alloc(std::min(T * d.q_heads * k_paged_max_splits, k_paged_split_slots) * (D + 2) * sizeof(float));
  return ws;
}

}  // namespace

result<device_usage> device_footprint(const model_desc& desc, const plan_options& opt, const device_share& s,
                                      int n_used_devices, std::vector<tensor_placement>* placements,
                                      int device_index) {
  const auto& hp = desc.hp;
  const uint64_t g = opt.rt.alloc_granularity ? opt.rt.alloc_granularity : 1;
  const std::function<uint64_t(uint64_t)> alloc = [g](uint64_t bytes) { return bytes == 0 ? 0 : align_up(bytes, g); };
  device_usage u;
  if (!s.used()) return u;

  // Weights.
  weight_layout w(device_index, placements);
  const placement_kind norm_kind =
      opt.split == split_mode::tensor && n_used_devices > 1 ? placement_kind::replica : placement_kind::whole;
  if (s.embeddings) TANDEM_TRY(w.matrix(desc.token_embd, placement_kind::whole, 0, 0));
  if (s.output) {
    TANDEM_TRY(w.matrix(desc.output, placement_kind::whole, 0, 0));
    w.note_output_head(desc.output);
    TANDEM_TRY(w.vector(desc.output_norm, placement_kind::whole));
  }
  weight_layout experts(device_index, placements);
  for (uint32_t il = s.layer_begin; il < s.layer_end; ++il)
    TANDEM_TRY(add_layer(desc, il, s, norm_kind, w, experts));
  u.weights = alloc(w.matrix_bytes()) + alloc(w.vector_bytes());
  u.experts = alloc(experts.matrix_bytes());
  u.tensor_bytes = w.file_bytes() + experts.file_bytes();

  // KV cache: cuda_kv_cache allocates K and V as one buffer each over the device's attention layers.
  const share_dims d = dims_of(hp, s);
  const uint64_t blocks_per_seq = (uint64_t{opt.n_ctx} + opt.block_size - 1) / opt.block_size;
  const uint64_t n_slots = opt.n_kv_tokens > 0
                               ? (opt.n_kv_tokens + opt.block_size - 1) / opt.block_size * opt.block_size
                               : blocks_per_seq * opt.n_seqs * opt.block_size;
  if (n_slots > k_max_kv_slots)
    return make_error("KV cache: ", opt.n_seqs, " sequences of ", opt.n_ctx, " tokens need ", n_slots,
                      " slots, more than the cache supports (", k_max_kv_slots, ")");
  const uint64_t kv_layer = n_slots * kv_row_bytes(opt.kv_type, d.kv_heads, hp.head_dim);
  u.kv_cache = 2 * alloc(kv_layer * d.n_attn);

  // Recurrent state (kv_cache::recurrent_bytes() for the device's share): per sequence and
  // DeltaNet layer the conv's last K-1 inputs of its channels and S of its value heads, fp32;
  // one buffer for the live state and one for the checkpoint copy.
  if (d.n_dn && d.dn_k) {
    const delta_net_shape dn = delta_net_of(hp);
    const uint64_t per_layer = uint64_t(dn.kernel - 1) * d.C + d.dn_v * dn.k_dim * dn.v_dim;
    u.state = 2 * alloc(uint64_t{opt.n_seqs} * d.n_dn * per_layer * sizeof(float));
  }

  u.activations = activation_bytes(desc, opt, s, d, blocks_per_seq, alloc);
  // One expert is the largest matrix the weight tile ever holds of an expert tensor.
  const uint64_t largest = std::max(w.largest_elems(), experts.largest_elems() / std::max(1u, hp.n_expert));
  u.workspace = workspace_bytes(desc, opt, d, largest, alloc);
  u.overhead = device_overhead_bytes(opt, n_used_devices);
  u.total = u.weights + u.experts + u.kv_cache + u.state + u.activations + u.workspace + u.overhead;
  return u;
}

}  // namespace tandem
