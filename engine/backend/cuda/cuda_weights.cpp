// Weight upload for the CUDA backend: one device allocation for all matrices, filled through two
// pinned staging buffers so the host copy out of the mapping overlaps the PCIe transfer.
#include "backend/cuda/cuda_weights.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "kernels/cuda_check.h"
#include "kernels/dequant.h"
#include "quant/quant.h"

namespace tandem {
namespace {

constexpr uint64_t k_align = 256;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Copies host bytes to device memory through the staging buffers; events keep a buffer from being
// overwritten while its previous transfer is still in flight.
class stager {
 public:
  stager(const cuda_context& ctx, size_t bytes) : ctx_(ctx), bytes_(bytes) {}
  ~stager() {
    for (auto& e : done_)
      if (e) TANDEM_CUDA_LOG(cudaEventDestroy(e));
  }

  status init() {
    for (int i = 0; i < 2; ++i) {
      TANDEM_TRY(buf_[i].ensure(bytes_));
      TANDEM_CUDA_TRY(cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming));
    }
    return {};
  }

  status copy(uint8_t* dst, const uint8_t* src, uint64_t n) {
    while (n > 0) {
      const uint64_t piece = n < bytes_ ? n : bytes_;
      TANDEM_CUDA_TRY(cudaEventSynchronize(done_[next_]));
      std::memcpy(buf_[next_].get(), src, piece);
      TANDEM_CUDA_TRY(cudaMemcpyAsync(dst, buf_[next_].get(), piece, cudaMemcpyHostToDevice, ctx_.stream()));
      TANDEM_CUDA_TRY(cudaEventRecord(done_[next_], ctx_.stream()));
      next_ ^= 1;
      dst += piece, src += piece, n -= piece;
    }
    return {};
  }

 private:
  const cuda_context& ctx_;
  size_t bytes_;
  pinned_buffer buf_[2];
  cudaEvent_t done_[2] = {nullptr, nullptr};
  int next_ = 0;
};

status check_matrix(const gguf_tensor* t) {
  if (!t) return make_error("CUDA backend: a required weight is missing");
  if (!gpu_can_dequantize(t->type))
    return make_error("CUDA backend: tensor ", t->name, " has type ", type_name(t->type),
                      ", which the CUDA kernels do not compute with");
  if (!row_bytes(t->type, t->dims[0]))
    return make_error("CUDA backend: tensor ", t->name, " rows are not whole blocks");
  return {};
}

device_matrix matrix_at(const gguf_tensor& t, const uint8_t* base, uint64_t offset) {
  device_matrix m;
  m.type = t.type;
  m.data = base + offset;
  m.n_in = static_cast<int64_t>(t.dims[0]);
  m.n_out = static_cast<int64_t>(t.n_elements / t.dims[0]);
  m.row_bytes = row_bytes(t.type, t.dims[0]).value_or(0);
  return m;
}

// Float copies of the small tensors, packed with 256-byte alignment; returns each one's offset.
struct vector_pack {
  std::vector<float> data;
  std::map<const gguf_tensor*, uint64_t> offsets;  // in floats

  void add(const gguf_tensor* t) {
    if (!t || offsets.count(t)) return;
    const uint64_t off = align_up(data.size(), k_align / sizeof(float));
    data.resize(off + t->n_elements);
    dequantize_row(t->type, t->data, data.data() + off, static_cast<int64_t>(t->n_elements));
    offsets[t] = off;
  }
  const float* at(const gguf_tensor* t, const float* base) const {
    return t ? base + offsets.at(t) : nullptr;
  }
};

}  // namespace

status upload_weights(const model_desc& desc, const cuda_context& ctx, size_t staging_bytes,
                      const weight_range& range, device_weights& w, cuda_load_stats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t lb = range.layer_begin, le = std::min<uint32_t>(range.layer_end, uint32_t(desc.layers.size()));
  if (lb > le) return make_error("CUDA backend: empty layer range ", lb, "..", le);
  // Matrices (the tied output head shares token_embd's copy).
  std::vector<const gguf_tensor*> mats;
  if (range.embedding) mats.push_back(desc.token_embd);
  if (range.head) mats.push_back(desc.output);
  for (uint32_t il = lb; il < le; ++il) {
    const auto& l = desc.layers[il];
    for (const gguf_tensor* t : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down}) mats.push_back(t);
  }
  std::map<const gguf_tensor*, uint64_t> offsets;
  uint64_t total = 0;
  for (const gguf_tensor* t : mats) {
    TANDEM_TRY(check_matrix(t));
    if (offsets.count(t)) continue;
    offsets[t] = total;
    total = align_up(total + t->n_bytes, k_align);
  }
  for (const gguf_tensor* t : {desc.output_norm})
    if (!t) return make_error("CUDA backend: output_norm is missing");

  vector_pack vecs;
  if (range.head) vecs.add(desc.output_norm);
  for (uint32_t il = lb; il < le; ++il) {
    const auto& l = desc.layers[il];
    for (const gguf_tensor* t : {l.attn_norm, l.ffn_norm, l.q_norm, l.k_norm, l.bq, l.bk, l.bv}) vecs.add(t);
  }

  TANDEM_TRY(w.matrices.alloc(total));
  TANDEM_TRY(w.vectors.alloc(vecs.data.size() * sizeof(float)));
  auto* base = w.matrices.get<uint8_t>();
  {
    stager st(ctx, staging_bytes);
    TANDEM_TRY(st.init());
    for (const auto& [t, off] : offsets) TANDEM_TRY(st.copy(base + off, t->data, t->n_bytes));
    TANDEM_CUDA_TRY(cudaMemcpyAsync(w.vectors.get(), vecs.data.data(), vecs.data.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, ctx.stream()));
    TANDEM_CUDA_TRY(cudaStreamSynchronize(ctx.stream()));
  }

  const auto* vbase = w.vectors.get<float>();
  if (range.embedding) w.token_embd = matrix_at(*desc.token_embd, base, offsets.at(desc.token_embd));
  if (range.head) {
    w.output = matrix_at(*desc.output, base, offsets.at(desc.output));
    w.output_norm = vecs.at(desc.output_norm, vbase);
  }
  w.layers.assign(desc.layers.size(), device_layer{});
  for (uint32_t il = lb; il < le; ++il) {
    const auto& l = desc.layers[il];
    device_layer& d = w.layers[il];
    d.attn_norm = vecs.at(l.attn_norm, vbase);
    d.ffn_norm = vecs.at(l.ffn_norm, vbase);
    d.q_norm = vecs.at(l.q_norm, vbase);
    d.k_norm = vecs.at(l.k_norm, vbase);
    d.bq = vecs.at(l.bq, vbase);
    d.bk = vecs.at(l.bk, vbase);
    d.bv = vecs.at(l.bv, vbase);
    d.wq = matrix_at(*l.wq, base, offsets.at(l.wq));
    d.wk = matrix_at(*l.wk, base, offsets.at(l.wk));
    d.wv = matrix_at(*l.wv, base, offsets.at(l.wv));
    d.wo = matrix_at(*l.wo, base, offsets.at(l.wo));
    d.gate = matrix_at(*l.ffn_gate, base, offsets.at(l.ffn_gate));
    d.up = matrix_at(*l.ffn_up, base, offsets.at(l.ffn_up));
    d.down = matrix_at(*l.ffn_down, base, offsets.at(l.ffn_down));
  }
  uint64_t copied = 0;
  for (const auto& [t, off] : offsets) copied += t->n_bytes;
  stats.bytes = copied + vecs.data.size() * sizeof(float);
  stats.device_bytes = total + vecs.data.size() * sizeof(float);
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats.device_name = ctx.description();
  return {};
}

}  // namespace tandem
