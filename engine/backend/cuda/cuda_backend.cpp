// CUDA forward pass for the llama / qwen2 / qwen3 / qwen35 family on one GPU, mirroring the CPU
// reference (backend/cpu/cpu_backend.cpp) op for op. Decode-sized batches use the quantized mat-vec
// kernels; larger ones dequantize weight tiles to fp16 and run cuBLAS GEMMs. Attention: long runs
// of one sequence's tokens go through the flash-attention kernel (no n² score buffer); the rest
// through the split-K paged kernel. qwen35's DeltaNet layers are in cuda_hybrid_block.cpp.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <iterator>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "backend/cuda/cuda_backend_impl.h"
#include "kernels/attention.h"
#include "kernels/cuda_check.h"
#include "kernels/dequant.h"
#include "kernels/flash_attention.h"
#include "kernels/layer_ops.h"
#include "kernels/matvec.h"
#include "kernels/moe.h"
#include "kernels/qgemm.h"

namespace tandem {
namespace {

constexpr int64_t k_weight_tile_elems = 64ll << 20;  // fp16 weight elements dequantized at once

// Whether launch_qk_rope_store takes this model's heads (else the separate norm, RoPE and store).
bool fused_rope_fits(const hparams& hp) {
  return hp.n_head > 0 && hp.n_head_kv > 0 && qk_rope_store_fits(int(hp.head_dim), int(hp.rope_dim));
}

}  // namespace

cuda_backend::cuda_backend(const model_desc& desc, std::unique_ptr<cuda_context> ctx, const weight_range& range)
    : desc_(desc), ctx_(std::move(ctx)), range_(range), hp_(desc.hp) {
  range_.layer_end = std::min(range_.layer_end, desc_.hp.n_layer);
  // A tensor split's device computes only its heads and FFN columns: hp_ counts those.
  const uint32_t grp = desc.hp.n_head / desc.hp.n_head_kv;
  const uint32_t kb = std::min(range_.kv_head_begin, desc.hp.n_head_kv);
  hp_.n_head_kv = std::max(kb, std::min(range_.kv_head_end, desc.hp.n_head_kv)) - kb;
  hp_.n_head = hp_.n_head_kv * grp;
  const uint64_t fb = std::min<uint64_t>(range_.ffn_begin, desc.hp.n_ff);
  hp_.n_ff = uint32_t(std::max(fb, std::min<uint64_t>(range_.ffn_end, desc.hp.n_ff)) - fb);
}

status cuda_backend::init(const cuda_backend_options& opt) {
  const char* env = std::getenv("TANDEM_CUDA_GRAPHS");
  // Profiling records an event between launch groups: no graphs then (and no launch overlap).
  profile_ = opt.profile;
  use_graphs_ = opt.graphs && !profile_ && !(env && std::string_view(env) == "0");
  const char* head = std::getenv("TANDEM_CUDA_HEAD_INT8");
  head_int8_ = head && std::string_view(head) == "1";
  const char* head_float = std::getenv("TANDEM_CUDA_HEAD_FLOAT");
  head_float_ = head_float && std::string_view(head_float) == "1";
  const char* side = std::getenv("TANDEM_CUDA_SIDE_STREAM");
  side_stream_ = !(side && std::string_view(side) == "0");
  const char* fused = std::getenv("TANDEM_CUDA_FUSED_SWIGLU");
  fused_swiglu_ = !(fused && std::string_view(fused) == "0");
  const char* down_combine = std::getenv("TANDEM_MOE_DOWN_COMBINE");
  down_combine_ = !(down_combine && std::string_view(down_combine) == "0");
  const char* router_norm = std::getenv("TANDEM_MOE_ROUTER_NORM");
  router_norm_ = !(router_norm && std::string_view(router_norm) == "0");
  upload_options up;
  up.slot_bytes = opt.staging_bytes;
  up.threads = opt.upload_threads;
  up.progress = opt.progress;
  // pread() of the file instead of copies out of the mapping: opt-in until measured on a GPU
  // (docs/PERFORMANCE.md, "Weight upload to the GPU").
  const char* pread_env = std::getenv("TANDEM_CUDA_UPLOAD_PREAD");
  if (pread_env && std::string_view(pread_env) == "1") up.file = opt.file;
  TANDEM_TRY(upload_weights(desc_, *ctx_, up, range_, w_, stats_));
  TANDEM_CUDA_TRY(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  bytes_per_token_ = range_.head ? desc_.output->n_bytes : 0;
  int64_t largest = range_.head ? desc_.output->dims[0] * 256 : 0;
  for (uint32_t il = range_.layer_begin; il < range_.layer_end; ++il) {
    const device_layer& L = w_.layers[il];
    for (const device_matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down, &L.dn_qkv, &L.dn_gate,
                                   &L.dn_beta, &L.dn_alpha, &L.dn_out, &L.router, &L.shexp_gate, &L.gate_shexp,
                                   &L.up_shexp, &L.down_shexp}) {
      bytes_per_token_ += m->row_bytes * uint64_t(m->n_out);
      largest = std::max<int64_t>(largest, m->n_in * m->n_out);
      qgemm_floats_ = std::max(qgemm_floats_, qgemm_work_bytes(m->n_in, m->n_out, 1) / sizeof(float));
    }
    // A token reads k of the n_expert experts' rows (plan/active_weights.h counts the same).
    for (const device_matrix* m : {&L.gate_exps, &L.up_exps, &L.down_exps})
      if (hp_.n_expert > 0) bytes_per_token_ += m->row_bytes * uint64_t(m->n_out) * hp_.n_expert_used / hp_.n_expert;
  }
  // A decode token reads and writes its sequence's whole recurrent state in every DeltaNet layer.
  const recurrent_layout rec = cuda_kv_cache::recurrent_of(hp_, range_.layer_begin, range_.layer_end);
  state_bytes_per_token_ = 2 * rec.floats_per_seq() * sizeof(float);
  return weight_tile_.alloc(std::min(largest, k_weight_tile_elems) * sizeof(uint16_t));
}

result<std::unique_ptr<kv_cache>> cuda_backend::make_cache(const kv_cache_config& cfg) {
  auto c = normalize_kv_config(cfg);
  if (!c) return c.err();
  if (c->type != ggml_type::f16 && c->type != ggml_type::f32 && c->type != ggml_type::q8_0)
    return make_error("KV cache type ", type_name(c->type),
                      " is not supported by the CUDA backend (use F16, F32 or Q8_0)");
  if (c->type == ggml_type::q8_0 && desc_.hp.head_dim % 32 != 0)
    return make_error("KV cache type Q8_0 needs the head size (", desc_.hp.head_dim, ") to be a multiple of 32");
  TANDEM_TRY(ctx_->activate());
  auto cache = std::make_unique<cuda_kv_cache>(*c, hp_, this, ctx_.get(), range_.layer_begin, range_.layer_end);
  TANDEM_TRY(cache->init());
  return std::unique_ptr<kv_cache>(std::move(cache));
}

status cuda_backend::run(const batch& b, kv_cache& cache_base, bool argmax) {
  auto* cache = dynamic_cast<cuda_kv_cache*>(&cache_base);
  if (!cache || cache->owner() != this) return make_error("the KV cache was not made by this CUDA backend");
  if (b.size() > static_cast<size_t>(k_cuda_max_batch))
    return make_error("batch of ", b.size(), " tokens exceeds the CUDA backend's limit of ", k_cuda_max_batch);
  TANDEM_TRY(ctx_->activate());
  state_cache_ = nullptr;
  TANDEM_TRY(reserve_batch(b, *cache, desc_.hp.n_vocab));
  TANDEM_TRY(prepare(b, *cache));
  begin_states(b, *cache);
  return launch_step(*cache, argmax);
}

status cuda_backend::run_stage(const batch& b, const kv_cache& book, kv_cache& part_base, const input& in,
                               bool argmax) {
  auto* part = dynamic_cast<cuda_kv_cache*>(&part_base);
  if (!part || part->owner() != this) return make_error("the KV cache part was not made by this CUDA stage");
  TANDEM_TRY(ctx_->activate());
  TANDEM_TRY(prepare(b, book));
  if (in.x) {
    // The hand-over: the previous device's residual stream, once its layers are done.
    const cudaStream_t s = ctx_->stream();
    TANDEM_CUDA_TRY(cudaStreamWaitEvent(s, in.ready, 0));
    TANDEM_CUDA_TRY(cudaMemcpyPeerAsync(x_.get(), ctx_->device(), in.x, in.device,
                                        size_t(plan_.n_tok) * desc_.hp.n_embd * sizeof(float), s));
  }
  TANDEM_TRY(launch_step(*part, argmax));
  TANDEM_CUDA_TRY(cudaEventRecord(done_, ctx_->stream()));
  return {};
}

status cuda_backend::launch_stage(kv_cache& part_base, bool argmax) {
  auto* part = dynamic_cast<cuda_kv_cache*>(&part_base);
  if (!part || part->owner() != this) return make_error("the KV cache part was not made by this CUDA stage");
  TANDEM_TRY(ctx_->activate());
  return launch_step(*part, argmax);
}

status cuda_backend::copy_out(std::vector<float>* logits, std::vector<int32_t>* ids) {
  TANDEM_TRY(ctx_->activate());
  const cudaStream_t s = ctx_->stream();
  if (logits) {
    logits->resize(static_cast<size_t>(plan_.n_out) * desc_.hp.n_vocab);
    if (!logits->empty())
      TANDEM_CUDA_TRY(cudaMemcpyAsync(logits->data(), logits_.get(), logits->size() * sizeof(float),
                                      cudaMemcpyDeviceToHost, s));
  }
  if (ids) {
    ids->resize(plan_.n_out);
    if (!ids->empty())
      TANDEM_CUDA_TRY(cudaMemcpyAsync(ids->data(), ids_.get(), ids->size() * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, s));
  }
  TANDEM_CUDA_TRY(cudaStreamSynchronize(s));
  return profile_ ? profile_->collect() : status{};
}

status cuda_backend::prepare(const batch& b, const kv_cache& book) {
  plan_batch(b, book, hp_, plan_);
  // Everything the step touches is allocated before it is enqueued, so a capture never allocates.
  TANDEM_TRY(ensure_scratch(plan_.n_tok));
  const size_t int_bytes = plan_.ints.size() * sizeof(int32_t);
  const size_t before[] = {ints_host_.size(), ints_.size(), xo_.size(), logits_.size(), ids_.size(), attn_work_.size()};
  TANDEM_TRY(ints_host_.ensure(int_bytes));
  TANDEM_TRY(ints_.ensure(int_bytes));
  // Only the device with the output head holds logits (as the memory plan counts them).
  if (range_.head) {
    const size_t n_out = size_t(plan_.n_out), E = desc_.hp.n_embd;
    TANDEM_TRY(xo_.ensure(std::max<size_t>(n_out, 1) * E * sizeof(float)));
    TANDEM_TRY(logits_.ensure(std::max<size_t>(n_out, 1) * desc_.hp.n_vocab * sizeof(float)));
    TANDEM_TRY(ids_.ensure(std::max<size_t>(n_out, 1) * sizeof(int32_t)));
  }
  // The previous forward ended with a stream sync, so the pinned buffer is free to refill; the
  // step (graph or not) copies it to the device as its first operation.
  std::memcpy(ints_host_.get(), plan_.ints.data(), int_bytes);
  // The paged attention's split workspace: room for every split this step's tokens would take
  // (deep caches split further; capped in partials). Its arrival counters must start at zero;
  // launches leave them so.
  const size_t attn_bytes =
      paged_attention_step_work_floats(plan_.n_tok, int(hp_.n_head), int(hp_.head_dim)) * sizeof(float);
  if (attn_bytes > attn_work_.size()) {
    TANDEM_TRY(attn_work_.alloc(attn_bytes));
    TANDEM_CUDA_TRY(cudaMemsetAsync(attn_work_.get(), 0, attn_bytes, ctx_->stream()));
  }
  // A buffer that grew may come back at its old address, which would match an older graph's key;
  // but a graph's copy nodes hold the allocation they were captured with (replaying one after its
  // pinned source was freed crashed inside cudaGraphLaunch), so graphs go when a buffer grows.
  const size_t after[] = {ints_host_.size(), ints_.size(), xo_.size(), logits_.size(), ids_.size(), attn_work_.size()};
  if (!std::equal(std::begin(before), std::end(before), std::begin(after))) graphs_.clear();
  return {};
}

status cuda_backend::launch_step(cuda_kv_cache& cache, bool argmax) {
  // Decode-sized steps without prefill runs (flash attention) are the repeated ones worth a graph:
  // one sequence's, or a batch of sequences' next tokens (the mat-vec path's sizes).
  if (use_graphs_ && plan_.n_tok <= k_qgemm_max_tokens && plan_.runs.empty())
    return graphs_.run(step_key(cache, argmax), ctx_->stream(), [&] { return enqueue(cache, argmax); });
  return enqueue(cache, argmax);
}

graph_key cuda_backend::step_key(const cuda_kv_cache& cache, bool argmax) const {
  auto addr = [](const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); };
  // Buffers only grow, so an unchanged address still holds at least what the graph uses.
  return {uint64_t(plan_.n_tok), uint64_t(plan_.n_out), uint64_t(plan_.n_tables), uint64_t(plan_.max_blocks),
          uint64_t(plan_.paged_max_kv), uint64_t(plan_.any_paged), uint64_t(argmax), uint64_t(scratch_tokens_),
          uint64_t(plan_.ints.size()), addr(ints_host_.get()), addr(ints_.get()), addr(xo_.get()),
          addr(logits_.get()), addr(ids_.get()), addr(attn_work_.get()), addr(cache.k_base()), addr(cache.v_base()),
          addr(cache.state_base()), uint64_t(plan_.n_dn_runs), uint64_t(plan_.dn_max_tokens)};
}

status cuda_backend::enqueue(cuda_kv_cache& cache, bool argmax) {
  const cudaStream_t s = ctx_->stream();
  if (profile_) TANDEM_TRY(profile_->begin(s));
  TANDEM_CUDA_TRY(cudaMemcpyAsync(ints_.get(), ints_host_.get(), plan_.ints.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, s));
  TANDEM_TRY(mark("batch upload"));
  const auto& hp = hp_;
  const int T = plan_.n_tok;
  // Decode steps bring their rotations in the upload; a prefill pass computes them here, once for
  // all layers (several kernels ahead of the first that reads them before its pdl_wait).
  rot_ready_ = plan_.off_rot == 0 && fused_rope_fits(hp) && T > 0;
  if (rot_ready_)
    TANDEM_CUDA_TRY(launch_rope_table(dev_ints(plan_.off_pos), T, int(hp.rope_dim), hp.rope_theta,
                                      rot_.get<float>(), s));
  // Later stages of a layer split find x_ filled by the hand-over copy instead.
  if (range_.embedding)
    TANDEM_CUDA_TRY(launch_get_rows(w_.token_embd.type, w_.token_embd.data, w_.token_embd.row_bytes,
                                    dev_ints(plan_.off_tokens), T, hp.n_embd, x_.get<float>(), s));
  if (comm_) TANDEM_TRY(comm_->broadcast(x_.get<float>(), size_t(T) * hp.n_embd, lead_rank_, s));
  TANDEM_TRY(mark("embedding"));
  norm_folded_ = -1;
  for (uint32_t il = range_.layer_begin; il < range_.layer_end; ++il) TANDEM_TRY(layer(il, cache));

  // Only rows that want logits pay for the output head.
  const int n_out = plan_.n_out;
  if (n_out == 0 || !range_.head) return {};
  TANDEM_CUDA_TRY(launch_gather_rows(x_.get<float>(), dev_ints(plan_.off_out), n_out, hp.n_embd,
                                     xo_.get<float>(), s));
  TANDEM_CUDA_TRY(launch_rms_norm(xo_.get<float>(), w_.output_norm, xo_.get<float>(), n_out, hp.n_embd,
                                  hp.rms_eps, s));
  TANDEM_TRY(mark("output norm"));
  TANDEM_TRY(output_head(xo_.get<float>(), n_out, logits_.get<float>()));
  TANDEM_TRY(mark("output head"));
  if (argmax)
    TANDEM_CUDA_TRY(launch_argmax(logits_.get<float>(), n_out, hp.n_vocab, ids_.get<int32_t>(), s));
  return mark("argmax");
}

status cuda_backend::ensure_scratch(int n) {
  if (n <= scratch_tokens_) return {};
  const auto& hp = hp_;
  const size_t T = size_t(n), E = hp.n_embd, QD = size_t(hp.n_head) * hp.head_dim,
               KD = size_t(hp.n_head_kv) * hp.head_dim, F = std::max(hp.n_ff, hp.n_ff_shexp);
  const size_t f = sizeof(float);
  TANDEM_TRY(x_.alloc(T * E * f));
  TANDEM_TRY(xn_.alloc(T * E * f));
  TANDEM_TRY(tmp_.alloc(T * E * f));
  TANDEM_TRY(q_.alloc(T * QD * f));
  TANDEM_TRY(att_.alloc(T * QD * f));
  TANDEM_TRY(rot_.alloc(T * hp.rope_dim * f));
  TANDEM_TRY(k_.alloc(T * KD * f));
  TANDEM_TRY(v_.alloc(T * KD * f));
  TANDEM_TRY(gate_.alloc(T * F * f));
  TANDEM_TRY(up_.alloc(T * F * f));
  // The widest matrix input: E, the attention output, the FFN's, or the DeltaNet's value heads.
  const size_t widest = std::max({E, QD, F, size_t(delta_net_of(hp).value_dim())});
  TANDEM_TRY(xh_.alloc(T * widest * sizeof(uint16_t)));
  // Also room for the head's two int8 copies of x (output_head) for up to four tokens.
  const int mv_tok = std::min(n, k_matvec_max_tokens);
  TANDEM_TRY(matvec_work_.alloc(std::max(matvec_work_bytes(int64_t(widest), mv_tok),
                                         matvec_work_bytes(int64_t(E), 2 * std::min(mv_tok, k_matvec_max_tokens / 2)))));
  TANDEM_TRY(qgemm_work_.alloc(qgemm_floats_ * size_t(std::min(n, k_qgemm_max_tokens)) * f));
  TANDEM_TRY(ensure_hybrid_scratch(n));
  TANDEM_TRY(ensure_moe_scratch(n));
  scratch_tokens_ = n;
  return {};
}

// Decode-sized heads do not read the plain int8 copy of x: its 1-4% error on activations with
// outliers flips near-tie argmaxes (seen on SmolLM2). Groups of 4 tokens read it with its residual's
// copy (launch_matvec_fine_x: about 1e-4 of sum |w x|, faster than floats) where the workspace
// holds both; else x as floats. TANDEM_CUDA_HEAD_INT8=1 restores the plain int8 path
// and TANDEM_CUDA_HEAD_FLOAT=1 the float path (to measure what each costs).
status cuda_backend::output_head(const float* x, int n_tok, float* y) {
  const device_matrix& w = w_.output;
  if (head_int8_ || n_tok > k_matvec_max_tokens || !gpu_can_matvec(w.type) || w.n_in % 32 != 0)
    return matmul(w, x, n_tok, y);
  const cudaStream_t s = ctx_->stream();
  // The workspace has room for the pairs of the scratch's tokens (ensure_scratch); asking room for
  // four tokens' pairs whatever n_tok sent one-token scratches (benches of -p 1) to floats.
  const bool use_fine = !head_float_ && n_tok <= k_matvec_max_tokens / 2 &&
                        matvec_work_bytes(w.n_in, 2 * n_tok) <= matvec_work_.size();
  if (use_fine)
    TANDEM_CUDA_TRY(launch_matvec_fine_x(w.type, w.data, w.n_in, w.n_out, x, n_tok, y, matvec_work_.get(), s));
  else
    TANDEM_CUDA_TRY(launch_matvec_float_x(w.type, w.data, w.n_in, w.n_out, x, n_tok, y, s));
  return {};
}

// Decode batches of 9..64 tokens (many sequences' next tokens): the decode-batch GEMM reads
// each weight once, from its GGUF blocks. done: false when the batch or matrix does not suit it.
status cuda_backend::try_qgemm(const device_matrix& w, const float* x, int n_tok, float* y, bool add, bool& done) {
  done = false;
  if (n_tok <= k_matvec_max_tokens || n_tok > k_qgemm_max_tokens || !gpu_can_qgemm(w.type) ||
      w.n_in % k_qgemm_k_step != 0 || qgemm_work_bytes(w.n_in, w.n_out, n_tok) > qgemm_work_.size())
    return {};
  const cudaStream_t s = ctx_->stream();
  TANDEM_TRY(x_to_f16(x, int64_t(n_tok) * w.n_in));
  TANDEM_CUDA_TRY(launch_qgemm(w.type, w.data, w.n_in, w.n_out, xh_.get<uint16_t>(), n_tok, y, add,
                               qgemm_work_.get(), s));
  done = true;
  return {};
}

// xh_ = fp16(x), unless matmul_fused's previous job left it there.
status cuda_backend::x_to_f16(const float* x, int64_t n) {
  if (xh_reuse_ && xh_src_ == x) return {};
  TANDEM_CUDA_TRY(launch_to_f16(x, xh_.get<uint16_t>(), n, ctx_->stream()));
  xh_src_ = x;
  return {};
}

status cuda_backend::matmul(const device_matrix& w, const float* x, int n_tok, float* y, bool add) {
  const cudaStream_t s = ctx_->stream();
  // Decode-sized steps (a few sequences' next tokens): the mat-vec reads the weights once, where
  // the GEMM path writes and reads a whole fp16 copy of them; larger decode batches, try_qgemm.
  if (n_tok <= k_matvec_max_tokens && gpu_can_matvec(w.type) && w.n_in % 32 == 0) {
    float* out = add ? tmp_.get<float>() : y;  // tmp_ holds n_embd outputs: only wo and down add
    TANDEM_CUDA_TRY(launch_matvec(w.type, w.data, w.n_in, w.n_out, x, n_tok, out, matvec_work_.get(), s));
    if (add) TANDEM_CUDA_TRY(launch_add(y, out, int64_t(n_tok) * w.n_out, s));
    return {};
  }
  bool done = false;
  TANDEM_TRY(try_qgemm(w, x, n_tok, y, add, done));
  if (done) return {};
  // GEMM path: fp16 activations and weight tiles, fp32 accumulation, y[t][o] row-major; with add,
  // cuBLAS's beta = 1 adds y (the same single float add as a separate pass would make).
  TANDEM_TRY(x_to_f16(x, int64_t(n_tok) * w.n_in));
  auto* xh = xh_.get<uint16_t>();
  // Tiles start on a multiple of 128 rows: a tile at an odd row offset puts the GEMM's output
  // off 16-byte alignment, which sends cuBLAS to kernels several times slower (Qwen3-32B's
  // 25600-row FFN matrices prefilled at a third of the speed before).
  const int64_t fit = int64_t(weight_tile_.size() / 2) / w.n_in;
  const int64_t tile_rows = std::min<int64_t>(w.n_out, fit >= 128 ? fit / 128 * 128 : std::max<int64_t>(fit, 1));
  const float one = 1.f, beta = add ? 1.f : 0.f;
  for (int64_t r0 = 0; r0 < w.n_out; r0 += tile_rows) {
    const int64_t rows = std::min(tile_rows, w.n_out - r0);
    auto* tile = weight_tile_.get<uint16_t>();
    TANDEM_CUDA_TRY(launch_dequantize_f16(w.type, w.data + r0 * w.row_bytes, tile, rows * w.n_in, s));
    TANDEM_CUBLAS_TRY(cublasGemmEx(ctx_->blas(), CUBLAS_OP_T, CUBLAS_OP_N, int(rows), n_tok, int(w.n_in), &one, tile,
                                   CUDA_R_16F, int(w.n_in), xh, CUDA_R_16F, int(w.n_in), &beta, y + r0, CUDA_R_32F,
                                   int(w.n_out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  return {};
}

// Decode-sized batches run matrices that share x (and type and n_in) as one mat-vec launch,
// with `add` folding the residual add into it (y += W·x): fewer launches and no tmp pass.
// Otherwise each goes through matmul(), x converted to fp16 once for all of them; x_f16_kept:
// xh_ already holds x's copy, made from this x in this layer (the MoE prefill's xn), and serves.
status cuda_backend::matmul_fused(std::initializer_list<matmul_job> jobs, const float* x, int n_tok, bool add,
                                  bool x_f16_kept) {
  const device_matrix& w0 = *jobs.begin()->w;
  bool fused = n_tok <= k_matvec_max_tokens && gpu_can_matvec(w0.type) && jobs.size() <= k_matvec_max_outputs &&
               w0.n_in % 32 == 0;
  for (const auto& j : jobs) fused = fused && j.w->type == w0.type && j.w->n_in == w0.n_in;
  if (fused) {
    matvec_output outs[k_matvec_max_outputs];
    int n = 0;
    for (const auto& j : jobs) outs[n++] = {j.w->data, j.w->n_out, j.y};
    TANDEM_CUDA_TRY(launch_matvec_multi(w0.type, w0.n_in, outs, n, x, n_tok, add, matvec_work_.get(), ctx_->stream()));
    return {};
  }
  // The jobs share x: its fp16 copy is made once for all of them.
  xh_reuse_ = true;
  if (!x_f16_kept) xh_src_ = nullptr;
  status st;
  for (const auto& j : jobs)
    if (!(st = matmul(*j.w, x, n_tok, j.y, add)).ok()) break;
  xh_reuse_ = false;
  return st;
}

// Decode-sized steps whose matrices all take the mat-vec: their x comes quantized from the kernel
// that produces it (RMSNorm, SwiGLU) and matrices of different types share that one copy.
bool cuda_backend::matvec_ready(std::initializer_list<const device_matrix*> ws, int n_tok) const {
  if (n_tok > k_matvec_max_tokens) return false;
  for (const device_matrix* w : ws)
    if (!gpu_can_matvec(w->type) || w->n_in % 32 != 0 || w->n_in != (*ws.begin())->n_in) return false;
  return true;
}

// y = W·x (or y += W·x) for each job from the int8 copy of x already in matvec_work_ (or in
// work, on stream s), k_matvec_max_outputs jobs a launch_matvec_jobs.
status cuda_backend::matvec_job_list(const matmul_job* jobs, int n_jobs, const float* x, int n_tok, bool add,
                                     void* work, cudaStream_t s) {
  for (int i = 0; i < n_jobs; i += k_matvec_max_outputs) {
    matvec_job js[k_matvec_max_outputs];
    int n = 0;
    for (int j = i; j < std::min(n_jobs, i + k_matvec_max_outputs); ++j)
      js[n++] = {jobs[j].w->type, jobs[j].w->data, jobs[j].w->n_out, jobs[j].y};
    TANDEM_CUDA_TRY(launch_matvec_jobs(jobs[0].w->n_in, js, n, x, true, n_tok, add, work ? work : matvec_work_.get(),
                                       work ? s : ctx_->stream()));
  }
  return {};
}

status cuda_backend::matvec_quantized(std::initializer_list<matmul_job> jobs, const float* x, int n_tok, bool add,
                                      void* work, cudaStream_t s) {
  return matvec_job_list(jobs.begin(), int(jobs.size()), x, n_tok, add, work, s);
}

// Decode projections of one x (its int8 copy in matvec_work_) whose matrices differ in type take
// a launch a type, one after another on one stream. Here the first job's type goes on the main
// stream and the others beside it on the side stream. forked: the side stream took some; the
// caller joins it (ctx_->join_side()) before reading their outputs. One stream when profiling
// (its groups are timed there) or with TANDEM_CUDA_SIDE_STREAM=0.
status cuda_backend::matvec_quantized_beside(std::initializer_list<matmul_job> jobs, const float* x, int n_tok,
                                             bool& forked) {
  constexpr int k_max = 8;
  matmul_job on_main[k_max], on_side[k_max];
  int nm = 0, ns = 0;
  const bool side = side_stream_ && !profile_;
  for (const matmul_job& j : jobs) {
    if (nm + ns == k_max) return make_error("CUDA backend: more than ", k_max, " projections of one x");
    if (!side || j.w->type == jobs.begin()->w->type)
      on_main[nm++] = j;
    else
      on_side[ns++] = j;
  }
  forked = ns > 0;
  if (forked) {
    TANDEM_TRY(ctx_->fork_side());
    TANDEM_TRY(matvec_job_list(on_side, ns, x, n_tok, false, matvec_work_.get(), ctx_->side_stream()));
  }
  return matvec_job_list(on_main, nm, x, n_tok, false, nullptr, nullptr);
}

// Whether layer il + 1 on this device opens with launch_rms_norm_q8 of x by its attn_norm (its
// projections all take the mat-vec) with nothing summing x in between (a tensor split does): then
// layer il's combine may write that norm itself (launch_moe_combine_norm, the same bits) and layer
// il + 1 skips the launch (norm_folded_).
bool cuda_backend::next_norm_foldable(uint32_t il, int T, moe_next_norm& nn) const {
  const uint32_t next = il + 1;
  if (comm_ || next >= range_.layer_end || !moe_combine_norm_fits(T, int64_t(hp_.n_embd))) return false;
  const auto& L = w_.layers[next];
  const bool q8 = hp_.kind(next) == layer_kind::delta_net
                      ? matvec_ready({&L.dn_qkv, &L.dn_gate, &L.dn_beta, &L.dn_alpha}, T)
                      : hp_.n_head_kv > 0 && matvec_ready({&L.wq, &L.wk, &L.wv}, T);
  if (!q8) return false;
  nn.w = L.attn_norm, nn.eps = hp_.rms_eps, nn.xn = xn_.get<float>(), nn.work = matvec_work_.get();
  return true;
}

// One layer. In a tensor split each device computes its heads' and FFN columns' share of the
// attention and FFN outputs; the sum over devices is what one GPU would add to x.
status cuda_backend::layer(uint32_t il, cuda_kv_cache& cache) {
  if (hp_.kind(il) == layer_kind::delta_net) {
    TANDEM_TRY(delta_net_block(il, cache));
  } else {
    TANDEM_TRY(hp_.n_head_kv > 0 ? attention_block(il, cache) : clear_partial());
  }
  TANDEM_TRY(reduce_partial());
  TANDEM_TRY(mark("sum after attention"));
  TANDEM_TRY(moe() ? moe_block(il) : hp_.n_ff > 0 ? ffn_block(il) : clear_partial());
  TANDEM_TRY(reduce_partial());
  return mark("sum after FFN");
}

// A device that adds nothing to this half of the layer: the lead keeps x, the others contribute 0.
status cuda_backend::clear_partial() {
  if (adds_residual()) return {};
  TANDEM_CUDA_TRY(cudaMemsetAsync(x_.get(), 0, size_t(plan_.n_tok) * hp_.n_embd * sizeof(float), ctx_->stream()));
  return {};
}

// x (the lead's x + its share, the others' shares) becomes the sum over the devices.
status cuda_backend::reduce_partial() {
  if (!comm_) return {};
  return comm_->all_reduce_sum(x_.get<float>(), size_t(plan_.n_tok) * hp_.n_embd, ctx_->stream());
}

status cuda_backend::attention_block(uint32_t il, cuda_kv_cache& cache) {
  const auto& hp = hp_;
  const auto& L = w_.layers[il];
  const cudaStream_t s = ctx_->stream();
  const int T = plan_.n_tok, E = int(hp.n_embd), D = int(hp.head_dim);
  const int QD = int(hp.n_head) * D, KD = int(hp.n_head_kv) * D;
  float *x = x_.get<float>(), *xn = xn_.get<float>(), *q = q_.get<float>(), *k = k_.get<float>(),
        *v = v_.get<float>();
  float* wq_out = hybrid() ? qg_.get<float>() : q;  // gated attention: [q, gate] rows, split below
  void* work = matvec_work_.get();
  bool forked = false;  // decode: wk / wv of another type than wq's on the side stream
  if (matvec_ready({&L.wq, &L.wk, &L.wv}, T)) {
    if (norm_folded_ != int64_t(il)) TANDEM_CUDA_TRY(launch_rms_norm_q8(x, L.attn_norm, xn, T, E, hp.rms_eps, work, s));
    TANDEM_TRY(mark("attention norm"));
    TANDEM_TRY(matvec_quantized_beside({{&L.wq, wq_out}, {&L.wk, k}, {&L.wv, v}}, xn, T, forked));
  } else {
    TANDEM_CUDA_TRY(launch_rms_norm(x, L.attn_norm, xn, T, E, hp.rms_eps, s));
    TANDEM_TRY(mark("attention norm"));
    TANDEM_TRY(matmul_fused({{&L.wq, wq_out}, {&L.wk, k}, {&L.wv, v}}, xn, T, false));
  }
  TANDEM_TRY(mark("wq wk wv"));
  if (hybrid()) TANDEM_TRY(split_q_gate(T));
  if (forked) TANDEM_TRY(ctx_->join_side());
  if (L.bq) {
    TANDEM_CUDA_TRY(launch_add_bias(q, L.bq, T, QD, s));
    TANDEM_CUDA_TRY(launch_add_bias(k, L.bk, T, KD, s));
    TANDEM_CUDA_TRY(launch_add_bias(v, L.bv, T, KD, s));
  }
  const bool neox = desc_.arch->flags.rope == rope_style::neox;
  const int32_t* pos = dev_ints(plan_.off_pos);
  // Norms, RoPE and the KV store as one launch: five launches a layer cost a 16-sequence decode
  // step ~1 ms (launch-bound), and a 2048-token prefill pass ~90 us a layer (five passes over q).
  if (plan_.off_rot != 0 || rot_ready_) {
    qk_rope_store_args a;
    a.q = q, a.k = k, a.v = v;
    a.q_norm = L.q_norm, a.k_norm = L.q_norm ? L.k_norm : nullptr, a.eps = hp.rms_eps;
    a.pos = pos, a.n_tok = T, a.n_head = int(hp.n_head), a.n_head_kv = int(hp.n_head_kv), a.head_dim = D;
    a.rope_dim = int(hp.rope_dim), a.theta = hp.rope_theta, a.neox = neox;
    a.k_cache = cache.k_layer(il), a.v_cache = cache.v_layer(il), a.cache_type = cache.config().type;
    a.slots = dev_ints(plan_.off_slots);
    a.rot = rot_ready_ ? rot_.get<float>() : reinterpret_cast<const float*>(dev_ints(plan_.off_rot));
    TANDEM_CUDA_TRY(launch_qk_rope_store(a, s));
  } else {
    if (L.q_norm) {
      TANDEM_CUDA_TRY(launch_rms_norm(q, L.q_norm, q, int64_t(T) * hp.n_head, D, hp.rms_eps, s));
      TANDEM_CUDA_TRY(launch_rms_norm(k, L.k_norm, k, int64_t(T) * hp.n_head_kv, D, hp.rms_eps, s));
    }
    TANDEM_CUDA_TRY(launch_rope(q, pos, T, int(hp.n_head), D, int(hp.rope_dim), hp.rope_theta, neox, s));
    TANDEM_CUDA_TRY(launch_rope(k, pos, T, int(hp.n_head_kv), D, int(hp.rope_dim), hp.rope_theta, neox, s));
    TANDEM_CUDA_TRY(launch_store_kv(k, v, cache.k_layer(il), cache.v_layer(il), cache.config().type,
                                    dev_ints(plan_.off_slots), T, KD, s));
  }
  TANDEM_TRY(mark("q k norm, rope, kv store"));
  // Decode steps whose tokens all take the paged kernel get att's int8 copy from it, or, where
  // the output gate changes att afterwards, from the gate's launch.
  const bool gated = hybrid(), wo_q8 = matvec_ready({&L.wo}, T) && L.wo.n_in == QD;
  const bool att_q8 = plan_.runs.empty() && wo_q8 && !gated, gate_q8 = gated && wo_q8 && D % 32 == 0;
  TANDEM_TRY(attention(il, cache, att_q8));
  TANDEM_TRY(mark("attention"));
  if (gated) TANDEM_TRY(gate_attention(T, gate_q8));
  if (att_q8 || gate_q8) {
    TANDEM_TRY(matvec_quantized({{&L.wo, x}}, att_.get<float>(), T, adds_residual()));  // x += wo·att
  } else {
    TANDEM_TRY(matmul_fused({{&L.wo, x}}, att_.get<float>(), T, adds_residual()));
  }
  return mark("wo");
}

status cuda_backend::ffn_block(uint32_t il) {
  const auto& hp = hp_;
  const auto& L = w_.layers[il];
  const cudaStream_t s = ctx_->stream();
  const int T = plan_.n_tok, E = int(hp.n_embd);
  float *x = x_.get<float>(), *xn = xn_.get<float>(), *g = gate_.get<float>(), *u = up_.get<float>();
  void* work = matvec_work_.get();
  const bool q8 = matvec_ready({&L.gate, &L.up}, T) && matvec_ready({&L.down}, T);
  if (q8) {
    TANDEM_CUDA_TRY(launch_rms_norm_q8(x, L.ffn_norm, xn, T, E, hp.rms_eps, work, s));
    TANDEM_TRY(mark("FFN norm"));
    TANDEM_TRY(matvec_quantized({{&L.gate, g}, {&L.up, u}}, xn, T, false));
    TANDEM_TRY(mark("gate up"));
    TANDEM_CUDA_TRY(launch_swiglu_q8(g, u, g, T, int(hp.n_ff), work, s));
    TANDEM_TRY(mark("swiglu"));
    TANDEM_TRY(matvec_quantized({{&L.down, x}}, g, T, adds_residual()));  // x += down·swiglu
  } else {
    TANDEM_CUDA_TRY(launch_rms_norm(x, L.ffn_norm, xn, T, E, hp.rms_eps, s));
    TANDEM_TRY(mark("FFN norm"));
    TANDEM_TRY(matmul_fused({{&L.gate, g}, {&L.up, u}}, xn, T, false));
    TANDEM_TRY(mark("gate up"));
    TANDEM_CUDA_TRY(launch_swiglu(g, u, g, int64_t(T) * hp.n_ff, s));
    TANDEM_TRY(mark("swiglu"));
    TANDEM_TRY(matmul_fused({{&L.down, x}}, g, T, adds_residual()));  // x += down·swiglu
  }
  return mark("down");
}

status cuda_backend::attention(uint32_t il, cuda_kv_cache& cache, bool quantize_out) {
  TANDEM_TRY(attention_runs(il, cache));
  if (!plan_.any_paged) return {};
  const auto& hp = hp_;
  paged_attention_args a;
  a.q = q_.get<float>();
  a.k_cache = cache.k_layer(il);
  a.v_cache = cache.v_layer(il);
  a.cache_type = cache.config().type;
  a.out = att_.get<float>();
  a.block_tables = dev_ints(plan_.off_tables);
  a.tok_table = dev_ints(plan_.off_table);
  a.tok_pos = dev_ints(plan_.off_paged);
  a.n_tok = plan_.n_tok;
  a.n_head = int(hp.n_head);
  a.n_head_kv = int(hp.n_head_kv);
  a.head_dim = int(hp.head_dim);
  a.block_size = int(cache.config().block_size);
  a.max_blocks = plan_.max_blocks;
  a.max_kv = plan_.paged_max_kv;
  a.scale = 1.f / std::sqrt(float(hp.head_dim));
  if (quantize_out) {
    const matvec_qx qx = matvec_x_parts(matvec_work_.get(), int64_t(a.n_head) * a.head_dim, a.n_tok);
    a.out_q = qx.q, a.out_ds = qx.ds;
  }
  TANDEM_CUDA_TRY(launch_paged_attention(a, attn_work_.get<float>(), attn_work_.size() / sizeof(float),
                                         ctx_->stream()));
  return {};
}

// The runs (long stretches of one sequence's tokens) in one flash-attention launch: their
// keys come from the cache, where this step's K and V were stored first.
status cuda_backend::attention_runs(uint32_t il, cuda_kv_cache& cache) {
  if (plan_.runs.empty()) return {};
  std::vector<flash_run> runs;
  runs.reserve(plan_.runs.size());
  for (const token_run& r : plan_.runs) runs.push_back({r.t0, r.n, r.table, r.pos0});
  flash_attention_args a;
  a.q = q_.get<float>();
  a.k_cache = cache.k_layer(il);
  a.v_cache = cache.v_layer(il);
  a.cache_type = cache.config().type;
  a.out = att_.get<float>();
  a.block_tables = dev_ints(plan_.off_tables);
  a.runs = runs.data();
  a.n_runs = int(runs.size());
  a.n_tok = plan_.n_tok;
  a.n_head = int(hp_.n_head);
  a.n_head_kv = int(hp_.n_head_kv);
  a.head_dim = int(hp_.head_dim);
  a.block_size = int(cache.config().block_size);
  a.max_blocks = plan_.max_blocks;
  a.scale = 1.f / std::sqrt(float(hp_.head_dim));
  TANDEM_CUDA_TRY(launch_flash_attention(a, ctx_->stream()));
  return {};
}

namespace {

// Checks that the shares cut every KV head and FFN column exactly once, with one lead.
status check_tensor_shares(const hparams& hp, const cuda_backend_options& opt) {
  const auto& sh = opt.tensor_shares;
  if (sh.size() != opt.devices.size())
    return make_error("CUDA tensor split: ", opt.devices.size(), " devices but ", sh.size(), " shares");
  if (std::count_if(sh.begin(), sh.end(), [](const cuda_tensor_share& s) { return s.lead; }) != 1)
    return make_error("CUDA tensor split: exactly one device must be the lead (embeddings and head)");
  uint64_t heads = 0, ffn = 0;
  for (const auto& s : sh) {
    if (s.kv_head_begin != heads || s.kv_head_end < s.kv_head_begin || s.ffn_begin != ffn || s.ffn_end < s.ffn_begin)
      return make_error("CUDA tensor split: the shares must be consecutive ranges of KV heads and FFN columns");
    heads = s.kv_head_end, ffn = s.ffn_end;
  }
  if (heads != hp.n_head_kv || ffn != hp.n_ff)
    return make_error("CUDA tensor split: the shares cover ", heads, " of ", hp.n_head_kv, " KV heads and ", ffn,
                      " of ", hp.n_ff, " FFN columns");
  return {};
}

result<std::unique_ptr<cuda_backend_api>> make_tensor_split(const model_desc& desc, const cuda_backend_options& opt) {
  TANDEM_TRY(check_tensor_shares(desc.hp, opt));
  const int n_dev = cuda_device_count();
  for (int d : opt.devices)
    if (d < 0 || d >= n_dev)
      return make_error("CUDA tensor split: device ", d, " does not exist (", n_dev, " device", n_dev == 1 ? "" : "s",
                        " found)");
  auto transport = opt.exchange.empty() ? collective_transport_from_env() : parse_collective_transport(opt.exchange);
  if (!transport) return transport.err();
  auto comms = make_cuda_collectives(opt.devices, *transport);
  if (!comms) return comms.err();
  std::vector<std::unique_ptr<cuda_stage>> stages;
  int lead = 0;
  for (size_t i = 0; i < opt.devices.size(); ++i) {
    const auto& sh = opt.tensor_shares[i];
    if (sh.lead) lead = int(i);
    weight_range r{0, UINT32_MAX, sh.lead, sh.lead, sh.kv_head_begin, sh.kv_head_end, sh.ffn_begin, sh.ffn_end};
    auto st = make_cuda_stage(desc, opt.devices[i], r, opt);
    if (!st) return st.err();
    stages.push_back(std::move(*st));
  }
  for (size_t i = 0; i < stages.size(); ++i) stages[i]->set_collective((*comms)[i].get(), lead);
  return make_cuda_tensor_backend(desc, std::move(stages), std::move(*comms), lead);
}

}  // namespace

result<std::unique_ptr<cuda_backend_api>> make_cuda_backend(const model_desc& desc, const cuda_backend_options& opt) {
  if (!desc.arch || !desc.token_embd || !desc.output || !desc.output_norm || desc.layers.size() != desc.hp.n_layer)
    return make_error("CUDA backend: the model description is not bound");
  const auto& hp = desc.hp;
  if (hp.head_dim != 32 && hp.head_dim != 64 && hp.head_dim != 128 && hp.head_dim != 256)
    return make_error("CUDA backend: head size ", hp.head_dim, " is not supported (32, 64, 128 or 256)");
  if (hp.n_head % hp.n_head_kv != 0)
    return make_error("CUDA backend: ", hp.n_head, " query heads do not divide into ", hp.n_head_kv, " KV heads");
  const bool several = !opt.tensor_shares.empty() || opt.devices.size() > 1 || opt.layers_per_device.size() > 1;
  if (const std::string why = split_unsupported(desc.arch->name, hp); several && !why.empty())
    return make_error("CUDA backend: ", why);
  if (hp.moe()) {
    if (hp.n_expert > uint32_t(k_moe_max_experts) || hp.n_expert_used > uint32_t(k_moe_max_k))
      return make_error("CUDA backend: ", hp.n_expert, " experts with ", hp.n_expert_used, " per token (at most ",
                        k_moe_max_experts, " and ", k_moe_max_k, ")");
    if (hp.n_embd % 32 != 0 || hp.n_ff_exp % 32 != 0)
      return make_error("CUDA backend: expert widths ", hp.n_embd, " and ", hp.n_ff_exp, " must be multiples of 32");
  }
  if (hp.hybrid()) {
    const delta_net_shape dn = delta_net_of(hp);
    if (dn.k_dim % 32 != 0 || dn.v_dim % 32 != 0 || dn.k_dim > 256 || dn.v_dim > 256)
      return make_error("CUDA backend: DeltaNet head sizes ", dn.k_dim, " (key) and ", dn.v_dim,
                        " (value) must be multiples of 32 up to 256");
  }
  if (opt.profile && several)
    return make_error("CUDA backend: profiling times one GPU (no layer or tensor split)");
  if (!opt.tensor_shares.empty()) return make_tensor_split(desc, opt);
  if (opt.devices.size() <= 1 && opt.layers_per_device.size() <= 1) {
    auto st = make_cuda_stage(desc, opt.devices.empty() ? opt.device : opt.devices[0], weight_range{}, opt);
    if (!st) return st.err();
    return std::unique_ptr<cuda_backend_api>(std::move(*st));
  }
  if (opt.devices.size() != opt.layers_per_device.size())
    return make_error("CUDA layer split: ", opt.devices.size(), " devices but ", opt.layers_per_device.size(),
                      " layer counts");
  uint64_t total = 0;
  for (uint32_t n : opt.layers_per_device) {
    if (n == 0) return make_error("CUDA layer split: every device must hold at least one layer");
    total += n;
  }
  if (total != hp.n_layer)
    return make_error("CUDA layer split: the layer counts add up to ", total, ", the model has ", hp.n_layer);
  std::vector<std::unique_ptr<cuda_stage>> stages;
  uint32_t first = 0;
  for (size_t i = 0; i < opt.devices.size(); ++i) {
    const uint32_t last = first + opt.layers_per_device[i];
    auto st = make_cuda_stage(desc, opt.devices[i], {first, last, i == 0, i + 1 == opt.devices.size()}, opt);
    if (!st) return st.err();
    stages.push_back(std::move(*st));
    first = last;
  }
  return make_cuda_split_backend(desc, std::move(stages));
}

result<std::unique_ptr<cuda_stage>> make_cuda_stage(const model_desc& desc, int device, const weight_range& range,
                                                    const cuda_backend_options& opt) {
  auto ctx = cuda_context::create(device);
  if (!ctx) return ctx.err();
  auto st = std::make_unique<cuda_backend>(desc, std::move(*ctx), range);
  TANDEM_TRY(st->init(opt));
  return std::unique_ptr<cuda_stage>(std::move(st));
}

int cuda_backend_device_count() { return cuda_device_count(); }

}  // namespace tandem
