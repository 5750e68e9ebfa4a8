// The bytes one device needs for its share of the model. Each formula restates an allocation of
// the CUDA backend (cuda_weights.cpp: one 256-byte-aligned matrix buffer and one float32 vector
// pack; cuda_backend.cpp: ensure_scratch, weight_tile_, the attention buffers, cuda_kv_cache,
// logits), applied to the device's shard; with the whole model on one device they are that
// backend's allocations exactly. Keep both in step when either changes.
#include <algorithm>
#include <set>

#include "core/exchange_layout.h"
#include "plan/memory_plan.h"

namespace tandem {
namespace {

constexpr uint64_t k_matrix_align = 256;           // cuda_weights.cpp k_align
constexpr uint64_t k_vector_align_floats = 64;     // the same 256 bytes, in floats
constexpr uint64_t k_weight_tile_elems = 64ull << 20;   // cuda_backend.cpp k_weight_tile_elems
constexpr uint64_t k_attention_budget = 256ull << 20;   // cuda_backend.cpp k_attention_budget
constexpr uint32_t k_gemm_attention_min = 16;           // cuda_backend.cpp k_gemm_attention_min
constexpr uint64_t k_paged_pairs_max = 1024;            // attention(): pairs cap
constexpr uint64_t k_paged_splits = 32;                 // attention(): splits the work is sized for
constexpr uint64_t k_max_kv_slots = 0x7fffffffull;      // normalize_kv_config's limit
constexpr uint64_t k_block_bucket = 32;                 // make_plan(): block-table width rounding
constexpr uint64_t k_matvec_tokens = 8;                 // kernels/matvec.h k_matvec_max_tokens

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Accumulates one device's weight buffers the way upload_weights lays them out.
class weight_layout {
 public:
  weight_layout(int device, std::vector<tensor_placement>* out) : device_(device), out_(out) {}

  status matrix(const gguf_tensor* t, placement_kind kind, uint64_t begin, uint64_t end) {
    if (!t || !matrices_.insert({t, begin}).second) return {};  // the tied head shares token_embd's copy
    const uint64_t n_in = t->dims[0], n_out = t->n_elements / t->dims[0];
    uint64_t bytes = t->n_bytes, elems = t->n_elements;
    if (kind == placement_kind::rows) {
      if (end <= begin) return {};
      bytes = (end - begin) * row_bytes(t->type, n_in).value_or(0);
      elems = (end - begin) * n_in;
    } else if (kind == placement_kind::columns) {
      if (end <= begin) return {};
      const uint32_t block = type_info(t->type).block_size;
      auto rb = row_bytes(t->type, end - begin);
      if (begin % block != 0 || !rb)
        return make_error("tensor ", t->name, " (", type_name(t->type), ", blocks of ", block,
                          ") cannot be cut at input columns ", begin, "..", end,
                          ": cuts must fall on whole blocks (try other ratios, or split layer)");
      bytes = n_out * *rb;
      elems = n_out * (end - begin);
    }
    matrix_bytes_ = align_up(matrix_bytes_ + bytes, k_matrix_align);
    file_bytes_ += bytes;
    largest_ = std::max(largest_, elems);
    record(t, kind, begin, end, bytes);
    return {};
  }

  // Norm weights and biases: float32 on the device, packed at 256-byte offsets.
  status vector(const gguf_tensor* t, placement_kind kind, uint64_t begin = 0, uint64_t end = 0) {
    if (!t || !vectors_.insert(t).second) return {};
    uint64_t n = t->n_elements, bytes = t->n_bytes;
    if (kind == placement_kind::columns) {
      if (end <= begin) return {};
      n = end - begin;
      auto rb = row_bytes(t->type, n);
      if (!rb) return make_error("tensor ", t->name, " cannot be cut at elements ", begin, "..", end);
      bytes = *rb;
    }
    vector_floats_ = align_up(vector_floats_, k_vector_align_floats) + n;
    file_bytes_ += bytes;
    record(t, kind, begin, end, bytes);
    return {};
  }

  void note_output_head(const gguf_tensor* out) { largest_ = std::max<uint64_t>(largest_, out->dims[0] * 256); }

  uint64_t matrix_bytes() const { return matrix_bytes_; }
  uint64_t vector_bytes() const { return vector_floats_ * sizeof(float); }
  uint64_t file_bytes() const { return file_bytes_; }
  uint64_t largest_elems() const { return largest_; }

 private:
  void record(const gguf_tensor* t, placement_kind kind, uint64_t begin, uint64_t end, uint64_t bytes) {
    if (!out_) return;
    const bool sliced = kind == placement_kind::rows || kind == placement_kind::columns;
    out_->push_back({t, device_, kind, sliced ? begin : 0, sliced ? end : 0, bytes});
  }

  int device_;
  std::vector<tensor_placement>* out_;
  std::set<std::pair<const gguf_tensor*, uint64_t>> matrices_;
  std::set<const gguf_tensor*> vectors_;
  uint64_t matrix_bytes_ = 0, vector_floats_ = 0, file_bytes_ = 0, largest_ = 0;
};

// One layer's tensors as the share cuts them: whole when the share has all heads / all columns.
status add_layer(const model_desc& desc, const layer_weights& l, const device_share& s, placement_kind norm_kind,
                 weight_layout& w) {
  const auto& hp = desc.hp;
  const uint64_t D = hp.head_dim, grp = hp.n_head / hp.n_head_kv;
  const bool all_heads = s.kv_head_begin == 0 && s.kv_head_end == hp.n_head_kv;
  const bool all_ffn = s.ffn_begin == 0 && s.ffn_end == hp.n_ff;
  const uint64_t q0 = s.kv_head_begin * grp * D, q1 = s.kv_head_end * grp * D;
  const uint64_t k0 = s.kv_head_begin * D, k1 = s.kv_head_end * D;
  const auto rows = all_heads ? placement_kind::whole : placement_kind::rows;
  const auto cols = all_heads ? placement_kind::whole : placement_kind::columns;
  TANDEM_TRY(w.matrix(l.wq, rows, q0, q1));
  TANDEM_TRY(w.matrix(l.wk, rows, k0, k1));
  TANDEM_TRY(w.matrix(l.wv, rows, k0, k1));
  TANDEM_TRY(w.matrix(l.wo, cols, q0, q1));  // row-parallel: this device's heads' inputs
  const auto frows = all_ffn ? placement_kind::whole : placement_kind::rows;
  const auto fcols = all_ffn ? placement_kind::whole : placement_kind::columns;
  TANDEM_TRY(w.matrix(l.ffn_gate, frows, s.ffn_begin, s.ffn_end));
  TANDEM_TRY(w.matrix(l.ffn_up, frows, s.ffn_begin, s.ffn_end));
  TANDEM_TRY(w.matrix(l.ffn_down, fcols, s.ffn_begin, s.ffn_end));
  // upload_weights packs vectors in this order: attn_norm, ffn_norm, q_norm, k_norm, bq, bk, bv.
  const auto bias = all_heads ? placement_kind::whole : placement_kind::columns;
  const bool any_heads = s.kv_head_end > s.kv_head_begin;
  TANDEM_TRY(w.vector(l.attn_norm, norm_kind));
  TANDEM_TRY(w.vector(l.ffn_norm, norm_kind));
  if (any_heads) {
    TANDEM_TRY(w.vector(l.q_norm, norm_kind));  // one head's weights, shared by all heads
    TANDEM_TRY(w.vector(l.k_norm, norm_kind));
    TANDEM_TRY(w.vector(l.bq, bias, q0, q1));
    TANDEM_TRY(w.vector(l.bk, bias, k0, k1));
    TANDEM_TRY(w.vector(l.bv, bias, k0, k1));
  }
  return {};
}

// Largest scores buffer of the GEMM attention path: attention_gemm() sizes it for grp heads ×
// tc query rows × n_kv keys, tc chosen to fit the budget; ensure() keeps the largest request.
uint64_t gemm_scores_at(uint64_t grp, uint64_t n_batch, uint64_t n_kv) {
  const uint64_t run = std::min(n_batch, n_kv);  // a run never holds more tokens than keys
  const uint64_t per_row = grp * n_kv * (sizeof(float) + sizeof(uint16_t));
  return grp * std::clamp<uint64_t>(k_attention_budget / per_row, 1, run) * n_kv;
}

uint64_t gemm_scores_floats(uint64_t grp, uint64_t n_batch, uint64_t n_ctx) {
  constexpr uint64_t k_scan = 1u << 20;
  uint64_t best = 0;
  for (uint64_t n_kv = k_gemm_attention_min; n_kv <= std::min(n_ctx, k_scan); ++n_kv)
    best = std::max(best, gemm_scores_at(grp, n_batch, n_kv));
  // Past the scan n_kv > n_batch, so tc only depends on budget / per_row: within a stretch of
  // equal tc the size grows with n_kv, so only each stretch's last n_kv (and n_ctx) can be largest.
  if (n_ctx > k_scan) {
    best = std::max(best, gemm_scores_at(grp, n_batch, n_ctx));
    for (uint64_t tc = 1;; ++tc) {
      const uint64_t end = k_attention_budget / (grp * (sizeof(float) + sizeof(uint16_t)) * tc);
      if (end <= k_scan) break;
      if (end <= n_ctx) best = std::max(best, gemm_scores_at(grp, n_batch, end));
    }
  }
  return best;
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

result<device_usage> device_footprint(const model_desc& desc, const plan_options& opt, const device_share& s,
                                      int n_used_devices, std::vector<tensor_placement>* placements,
                                      int device_index) {
  const auto& hp = desc.hp;
  const uint64_t g = opt.rt.alloc_granularity ? opt.rt.alloc_granularity : 1;
  auto alloc = [g](uint64_t bytes) { return bytes == 0 ? 0 : align_up(bytes, g); };
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
  for (uint32_t il = s.layer_begin; il < s.layer_end; ++il) TANDEM_TRY(add_layer(desc, desc.layers[il], s, norm_kind, w));
  u.weights = alloc(w.matrix_bytes()) + alloc(w.vector_bytes());
  u.tensor_bytes = w.file_bytes();

  // KV cache: cuda_kv_cache allocates K and V as one buffer each over the device's layers.
  const uint64_t n_layers = s.layer_end - s.layer_begin;
  const uint64_t kv_heads = s.kv_head_end - s.kv_head_begin, q_heads = kv_heads * (hp.n_head / hp.n_head_kv);
  const uint64_t blocks_per_seq = (uint64_t{opt.n_ctx} + opt.block_size - 1) / opt.block_size;
  const uint64_t n_slots = blocks_per_seq * opt.n_seqs * opt.block_size;
  if (n_slots > k_max_kv_slots)
    return make_error("KV cache: ", opt.n_seqs, " sequences of ", opt.n_ctx, " tokens need ", n_slots,
                      " slots, more than the cache supports (", k_max_kv_slots, ")");
  const uint64_t kv_layer = n_slots * kv_row_bytes(opt.kv_type, kv_heads, hp.head_dim);
  u.kv_cache = 2 * alloc(kv_layer * n_layers);

  // Activations: ensure_scratch for n_batch tokens with the device's heads and FFN columns.
  const uint64_t T = opt.n_batch, E = hp.n_embd, D = hp.head_dim, f = sizeof(float);
  const uint64_t QD = n_layers ? q_heads * D : 0, KD = n_layers ? kv_heads * D : 0,
                 F = n_layers ? s.ffn_end - s.ffn_begin : 0;
  const uint64_t L = opt.n_logits;
  uint64_t act = 3 * alloc(T * E * f) + 2 * alloc(T * QD * f) + 2 * alloc(T * KD * f) + 2 * alloc(T * F * f) +
                 alloc(T * std::max({E, QD, F}) * sizeof(uint16_t));
  // The packed per-batch integers: tokens, positions (twice), slots, tables, outputs, block tables.
  const uint64_t table_width = align_up(std::max<uint64_t>(1, blocks_per_seq), k_block_bucket);
  act += alloc((5 * T + L + std::min<uint64_t>(opt.n_seqs, T) * table_width) * 4);
  if (s.output) act += alloc(L * E * f) + alloc(L * hp.n_vocab * f) + alloc(L * sizeof(int32_t));
  u.activations = act;

  // Workspace.
  uint64_t ws = alloc(std::min(w.largest_elems(), k_weight_tile_elems) * sizeof(uint16_t));
  ws += alloc(matvec_work_bytes(std::max({E, QD, F}), std::min(T, k_matvec_tokens)));  // matvec_work_
  if (q_heads > 0 && n_layers > 0) {
    const uint64_t grp = hp.n_head / hp.n_head_kv;
    if (T >= k_gemm_attention_min && opt.n_ctx >= k_gemm_attention_min) {
      ws += 2 * alloc(kv_heads * opt.n_ctx * D * 2);                     // kh_, vh_
      ws += alloc(q_heads * std::min<uint64_t>(T, opt.n_ctx) * D * 2);  // qh_
      const uint64_t sf = gemm_scores_floats(grp, T, opt.n_ctx);
      ws += alloc(sf * sizeof(float)) + alloc(sf * sizeof(uint16_t));  // scores_, probs_
    }
    ws += alloc(std::min(T * q_heads, k_paged_pairs_max) * k_paged_splits * (D + 2) * sizeof(float));
  }
  u.workspace = ws;

  u.overhead = device_overhead_bytes(opt, n_used_devices);
  u.total = u.weights + u.kv_cache + u.activations + u.workspace + u.overhead;
  return u;
}

}  // namespace tandem
