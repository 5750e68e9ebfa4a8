// The mixture-of-experts FFN of the CUDA forward pass (qwen3moe, qwen35moe): the router, each
// token's k experts (decode: mat-vecs over the selected experts' rows; prefill: tokens grouped by
// expert on the device and one grouped GEMM per projection), the weighted sum, and the shared
// expert with its sigmoid gate. The math is backend/cpu/moe_ops.h's, through kernels/moe.h.
#include <algorithm>

#include "backend/cuda/cuda_backend_impl.h"
#include "kernels/cuda_check.h"
#include "kernels/layer_ops.h"
#include "kernels/matvec.h"
#include "kernels/moe.h"
#include "kernels/moe_route.h"

namespace tandem {
namespace {

// Bytes between consecutive experts of a stacked tensor whose experts have n_out rows each.
size_t expert_stride(const device_matrix& w, int64_t n_out) { return size_t(w.row_bytes) * size_t(n_out); }

bool decodes(const device_matrix& w, int n_tok) { return n_tok <= k_moe_matvec_max_tokens && gpu_can_moe_matvec(w.type); }

// y[t][o] = W[o] · x[t] in float32 (cuBLAS, no tensor-core rounding) for a float32 matrix: the
// router's logits pick the experts, and fp16 operands (matmul's prefill path) err by ~1e-3 of a
// logit, more than the gap between the k-th and (k+1)-th expert of some tokens.
status gemm_f32(cublasHandle_t blas, const device_matrix& w, const float* x, int n_tok, float* y) {
  const float one = 1.f, zero = 0.f;
  TANDEM_CUBLAS_TRY(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(w.n_out), n_tok, int(w.n_in), &one, w.data,
                                 CUDA_R_32F, int(w.n_in), x, CUDA_R_32F, int(w.n_in), &zero, y, CUDA_R_32F,
                                 int(w.n_out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return {};
}

}  // namespace

status cuda_backend::ensure_moe_scratch(int n) {
  if (!moe()) return {};
  const size_t T = size_t(n), k = hp_.n_expert_used, E = hp_.n_embd, F = hp_.n_ff_exp, f = sizeof(float);
  TANDEM_TRY(moe_logits_.alloc(T * std::max<size_t>(hp_.n_expert, 1) * f));
  TANDEM_TRY(moe_ids_.alloc(T * k * sizeof(int32_t)));
  TANDEM_TRY(moe_w_.alloc(T * k * f));
  TANDEM_TRY(moe_gate_.alloc(T * k * F * f));
  TANDEM_TRY(moe_up_.alloc(T * k * F * f));
  TANDEM_TRY(moe_y_.alloc(T * k * E * f));
  TANDEM_TRY(moe_group_.alloc((3 * (hp_.n_expert + 1) + T * k) * sizeof(int32_t)));
  const int dec = std::min(n, k_moe_matvec_max_tokens);
  const size_t work = std::max({moe_matvec_work_bytes(int64_t(E), dec), moe_matvec_work_bytes(int64_t(F), dec * int(k)),
                                moe_gemm_work_bytes(int64_t(E), int64_t(T)), moe_gemm_work_bytes(int64_t(F), int64_t(T * k)),
                                moe_group_work_bytes(n, int(k), int(hp_.n_expert))});
  if (hp_.n_ff_shexp > 0) {
    TANDEM_TRY(shexp_work_.alloc(matvec_work_bytes(int64_t(hp_.n_ff_shexp), dec)));
    TANDEM_TRY(shexp_logit_.alloc(size_t(dec) * f));
  }
  return moe_work_.alloc(std::max<size_t>(work, 16));
}

// x += sum_j w_j · expert_j(xn) (+ sigmoid(g · xn) · shared(xn)), xn = RMSNorm(x).
status cuda_backend::moe_block(uint32_t il) {
  const auto& L = w_.layers[il];
  const cudaStream_t s = ctx_->stream();
  const int T = plan_.n_tok, E = int(hp_.n_embd), k = int(hp_.n_expert_used);
  float *x = x_.get<float>(), *xn = xn_.get<float>();
  const bool dec = decodes(L.gate_exps, T) && decodes(L.up_exps, T) && decodes(L.down_exps, T);
  // Decode: the norm also writes xn's int8 copy, which gate and up read (one launch fewer).
  const bool xq = dec && L.gate_exps.type == L.up_exps.type && L.gate_exps.type != ggml_type::f32 &&
                  L.gate_exps.type != ggml_type::f16;
  // Decode: a float32 router takes the norm into its launch (every block norms the row itself).
  const bool router_norm = dec && router_norm_ && L.router.type == ggml_type::f32 && moe_router_norm_fits(T, E);
  if (router_norm) {
    TANDEM_CUDA_TRY(launch_moe_router_norm(x, L.ffn_norm, hp_.rms_eps, reinterpret_cast<const float*>(L.router.data),
                                           int(hp_.n_expert), E, T, moe_logits_.get<float>(), xn,
                                           xq ? matvec_work_.get() : nullptr, s));
  } else if (xq) {
    TANDEM_CUDA_TRY(launch_rms_norm_q8(x, L.ffn_norm, xn, T, E, hp_.rms_eps, matvec_work_.get(), s));
  } else {
    TANDEM_CUDA_TRY(launch_rms_norm(x, L.ffn_norm, xn, T, E, hp_.rms_eps, s));
  }
  TANDEM_TRY(mark(router_norm ? "FFN norm and router" : "FFN norm"));
  // Decode's shared expert reads only xn and its int8 copy and writes buffers of its own, so it
  // runs on the side stream beside the router and the routed experts (one chain of small
  // launches hidden behind the other); not when profiling, whose groups are timed on the main
  // stream. Its output and gate join the routed experts' sum in the combine's one pass.
  const bool shared = hp_.n_ff_shexp > 0;
  const bool side = shared && side_stream_ && !profile_ && L.shexp_gate.type == ggml_type::f32 &&
                    shared_expert_decodes(L, T, xq);
  moe_shared_term sh;
  if (side) {
    TANDEM_TRY(ctx_->fork_side());
    TANDEM_TRY(moe_shared_expert_decode(L, xn, T, true, sh));
  }
  TANDEM_TRY(route(L, xn, T, router_norm));
  // Decode's down projection adds the experts into x in its own launch where it can (no y rows,
  // no combine launch); the next layer then runs its input norm itself.
  if (dec && down_combine_ && (!shared || side) &&
      gpu_can_moe_down_combine(L.down_exps.type, int64_t(hp_.n_ff_exp), E, k)) {
    TANDEM_TRY(moe_experts_decode(L, xn, T, xq, false));
    if (side) TANDEM_TRY(ctx_->join_side());
    TANDEM_CUDA_TRY(launch_moe_down_combine(L.down_exps.type, L.down_exps.data, expert_stride(L.down_exps, E),
                                            int(hp_.n_expert), int64_t(hp_.n_ff_exp), E, moe_work_.get(), T, k,
                                            moe_ids_.get<int32_t>(), moe_w_.get<float>(), x,
                                            shared ? &sh : nullptr, s, true));
    return mark("experts down combine");
  }
  TANDEM_TRY(dec ? moe_experts_decode(L, xn, T, xq, true) : moe_experts_prefill(L, xn, T));
  if (shared && !side) TANDEM_TRY(moe_shared_expert(L, xn, T, xq, !dec, sh));
  if (side) TANDEM_TRY(ctx_->join_side());
  // Decode: the next layer's input norm folds into the combine (one launch fewer a layer).
  moe_next_norm nn;
  if (dec && next_norm_foldable(il, T, nn)) {
    TANDEM_CUDA_TRY(launch_moe_combine_norm(moe_y_.get<float>(), moe_w_.get<float>(), T, k, E, x, true, s,
                                            shared ? &sh : nullptr, nn));
    norm_folded_ = int64_t(il) + 1;
  } else {
    TANDEM_CUDA_TRY(launch_moe_combine(moe_y_.get<float>(), moe_w_.get<float>(), T, k, E, x, true, s,
                                       shared ? &sh : nullptr));
  }
  return mark("experts combine");
}

// Decode: each (token, slot)'s expert read on the device. Gate, up and the SwiGLU (writing down's
// int8 input) take one launch where the norm left xn's int8 copy in matvec_work_ and gate and up
// share a type that reads int8 x; else gate and up take one launch when they share a type, and
// the SwiGLU its own. with_down: the down projection into moe_y_ too (else the caller launches it).
status cuda_backend::moe_experts_decode(const device_layer& L, const float* xn, int T, bool x_quantized, bool with_down) {
  const cudaStream_t s = ctx_->stream();
  const int k = int(hp_.n_expert_used), n_exp = int(hp_.n_expert);
  const int64_t E = hp_.n_embd, F = hp_.n_ff_exp;
  const int32_t* ids = moe_ids_.get<int32_t>();
  float *g = moe_gate_.get<float>(), *u = moe_up_.get<float>();
  void* work = moe_work_.get();
  const size_t gu_stride = expert_stride(L.gate_exps, F);
  const moe_matvec_output outs[2] = {{L.gate_exps.data, g}, {L.up_exps.data, u}};
  const bool same = L.gate_exps.type == L.up_exps.type;
  if (fused_swiglu_ && x_quantized && same && gpu_can_moe_matvec_swiglu(L.gate_exps.type, F)) {
    TANDEM_CUDA_TRY(launch_moe_matvec_swiglu(L.gate_exps.type, outs, gu_stride, n_exp, E, F, matvec_work_.get(), T, k,
                                             ids, work, s));
    TANDEM_TRY(mark("experts gate up swiglu"));
  } else {
    if (same) {
      TANDEM_CUDA_TRY(launch_moe_matvec_multi(L.gate_exps.type, outs, 2, gu_stride, n_exp, E, F, xn, 0, x_quantized,
                                              T, k, ids, x_quantized ? matvec_work_.get() : work, s));
    } else {
      TANDEM_CUDA_TRY(launch_moe_matvec(L.gate_exps.type, L.gate_exps.data, gu_stride, n_exp, E, F, xn, 0, T, k, ids,
                                        g, work, s));
      TANDEM_CUDA_TRY(launch_moe_matvec(L.up_exps.type, L.up_exps.data, expert_stride(L.up_exps, F), n_exp, E, F, xn,
                                        0, T, k, ids, u, work, s));
    }
    TANDEM_TRY(mark("experts gate up"));
    TANDEM_CUDA_TRY(launch_moe_swiglu_q8(g, u, g, T * k, int(F), work, s));
    TANDEM_TRY(mark("experts swiglu"));
  }
  if (!with_down) return {};
  // Gate and up waited on the routing before they let down in: its first rows load early.
  const moe_matvec_output down[1] = {{L.down_exps.data, moe_y_.get<float>()}};
  TANDEM_CUDA_TRY(launch_moe_matvec_multi(L.down_exps.type, down, 1, expert_stride(L.down_exps, E), n_exp, F, E, g, F,
                                          true, T, k, ids, work, s, true));
  return mark("experts down");
}

// The router's logits (float32 products for float32 routers: they pick the experts), unless
// logits_ready (the norm's launch made them), and each token's k experts.
status cuda_backend::route(const device_layer& L, const float* xn, int T, bool logits_ready) {
  float* logits = moe_logits_.get<float>();
  if (!logits_ready)
    TANDEM_TRY(T > k_matvec_max_tokens && L.router.type == ggml_type::f32
                   ? gemm_f32(ctx_->blas(), L.router, xn, T, logits)
                   : matmul(L.router, xn, T, logits));
  TANDEM_CUDA_TRY(launch_moe_route(logits, T, int(hp_.n_expert), int(hp_.n_expert_used), hp_.expert_weights_norm,
                                   moe_ids_.get<int32_t>(), moe_w_.get<float>(), ctx_->stream()));
  return mark(logits_ready ? "routing" : "router");
}

// Prefill: the (token, slot) pairs sorted by expert on the device, then gate/up from the tokens'
// rows into grouped rows with SwiGLU (fused when they share a type), and down from grouped rows
// back to (token, slot) order. xn goes to fp16 once, into xh_ (the shared expert's GEMMs read it
// too); where gate and up share a type h comes out as fp16 for down (in up's buffer), so neither
// the h floats nor their conversion pass are made.
status cuda_backend::moe_experts_prefill(const device_layer& L, const float* xn, int T) {
  const cudaStream_t s = ctx_->stream();
  const int k = int(hp_.n_expert_used), n_exp = int(hp_.n_expert);
  const int64_t E = hp_.n_embd, F = hp_.n_ff_exp;
  for (const device_matrix* w : {&L.gate_exps, &L.up_exps, &L.down_exps})
    if (!gpu_can_moe_gemm(w->type))
      return make_error("CUDA backend: expert tensors of type ", type_name(w->type), " have no grouped GEMM");
  int32_t* grp = moe_group_.get<int32_t>();
  int32_t *counts = grp, *offsets = grp + (n_exp + 1), *tiles = grp + 2 * (n_exp + 1), *perm = grp + 3 * (n_exp + 1);
  void* work = moe_work_.get();
  TANDEM_CUDA_TRY(launch_moe_group(moe_ids_.get<int32_t>(), T, k, n_exp, counts, offsets, perm, tiles, work, s));
  TANDEM_TRY(x_to_f16(xn, int64_t(T) * E));
  const moe_gemm_f16 xn16{xh_.get<uint16_t>(), nullptr};
  float *g = moe_gate_.get<float>(), *u = moe_up_.get<float>();
  const size_t gu_stride = expert_stride(L.gate_exps, F);
  moe_gemm_f16 down16{};  // down's fp16 x, where gate and up made it
  if (L.gate_exps.type == L.up_exps.type) {
    // h = silu(gate) · up in one launch where the grouped GEMM fuses it, as fp16 into u's buffer.
    const moe_matvec_output outs[2] = {{L.gate_exps.data, g}, {L.up_exps.data, u}};
    down16.x16 = moe_up_.get<uint16_t>();
    TANDEM_CUDA_TRY(launch_moe_gemm_swiglu(L.gate_exps.type, outs, gu_stride, n_exp, E, F, xn, moe_rows::by_token,
                                           moe_rows::grouped, T, k, offsets, perm, tiles, work, s,
                                           {xn16.x16, moe_up_.get<uint16_t>()}));
    TANDEM_TRY(mark("experts gate up swiglu"));
  } else {
    const moe_matvec_output og[1] = {{L.gate_exps.data, g}}, ou[1] = {{L.up_exps.data, u}};
    TANDEM_CUDA_TRY(launch_moe_gemm(L.gate_exps.type, og, 1, gu_stride, n_exp, E, F, xn, moe_rows::by_token,
                                    moe_rows::grouped, T, k, offsets, perm, tiles, work, s, xn16));
    TANDEM_CUDA_TRY(launch_moe_gemm(L.up_exps.type, ou, 1, expert_stride(L.up_exps, F), n_exp, E, F, xn,
                                    moe_rows::by_token, moe_rows::grouped, T, k, offsets, perm, tiles, work, s, xn16));
    TANDEM_TRY(mark("experts gate up"));
    TANDEM_CUDA_TRY(launch_swiglu(g, u, g, int64_t(T) * k * F, s));
    TANDEM_TRY(mark("experts swiglu"));
  }
  const moe_matvec_output down[1] = {{L.down_exps.data, moe_y_.get<float>()}};
  TANDEM_CUDA_TRY(launch_moe_gemm(L.down_exps.type, down, 1, expert_stride(L.down_exps, E), n_exp, F, E, g,
                                  moe_rows::grouped, moe_rows::by_pair, T, k, offsets, perm, tiles, work, s, down16));
  return mark("experts down");
}

// Whether decode's form of the shared expert (below) takes this step: the norm left xn's int8
// copy, all three matrices take the mat-vec from int8 x, and a float32 gate row the mat-vec too.
bool cuda_backend::shared_expert_decodes(const device_layer& L, int T, bool x_quantized) const {
  return x_quantized && hp_.n_ff_shexp % 32 == 0 && matvec_ready({&L.gate_shexp, &L.up_shexp}, T) &&
         matvec_ready({&L.down_shexp}, T) && L.shexp_gate.n_in % 32 == 0;
}

// Decode's shared expert: gate and up from xn's int8 copy (the norm's, in matvec_work_), the
// SwiGLU writing down's int8 input, down, and a float32 gate row's logit as a one-row mat-vec of
// float xn after them, on the same stream: four launches in all, and the combine on the critical
// path reads one logit a token instead of dotting the row itself (~2 us a 35B layer). side: on
// the side stream, with down's input in shexp_work_ (the main stream's routed experts still read
// matvec_work_); a float32 gate row only.
status cuda_backend::moe_shared_expert_decode(const device_layer& L, const float* xn, int T, bool side,
                                              moe_shared_term& sh) {
  const cudaStream_t s = side ? ctx_->side_stream() : ctx_->stream();
  void* h_work = side ? shexp_work_.get() : matvec_work_.get();
  const int F = int(hp_.n_ff_shexp);
  float *g = gate_.get<float>(), *u = up_.get<float>(), *y = tmp_.get<float>(), *gl = moe_logits_.get<float>();
  sh = moe_shared_term{};
  sh.y = y;
  const bool row_gate = L.shexp_gate.type == ggml_type::f32;
  if (!row_gate) {
    if (side) return make_error("CUDA backend: the side stream takes float32 shared-expert gates only");
    TANDEM_TRY(matmul(L.shexp_gate, xn, T, gl));  // the router's logits are routed by now
  }
  TANDEM_TRY(matvec_quantized({{&L.gate_shexp, g}, {&L.up_shexp, u}}, xn, T, false, matvec_work_.get(), s));
  TANDEM_CUDA_TRY(launch_moe_swiglu_q8(g, u, g, T, F, h_work, s));
  TANDEM_TRY(matvec_quantized({{&L.down_shexp, y}}, g, T, false, h_work, s));
  if (row_gate) {
    gl = shexp_logit_.get<float>();
    TANDEM_CUDA_TRY(launch_matvec(ggml_type::f32, L.shexp_gate.data, L.shexp_gate.n_in, 1, xn, T, gl, nullptr, s));
  }
  sh.gate_logits = gl;
  return mark("shared expert");
}

// The shared expert's term of the combine: down(silu(gate xn) · up xn) into tmp_ through the dense
// FFN's buffers, and its gate; decode's form above where it applies. Prefill (xn_f16: xh_ holds
// xn's fp16 copy from this layer's routed experts): gate, up and the gate row are GEMMs from that
// copy, so the gate has the fp16 operands every prefill product has (with the combine's float32
// dot instead, the one numeric change on that path, qwen35moe_tiny's 88-token one-pass argmax
// test against transformers failed on an H200).
status cuda_backend::moe_shared_expert(const device_layer& L, const float* xn, int T, bool x_quantized, bool xn_f16,
                                       moe_shared_term& sh) {
  if (shared_expert_decodes(L, T, x_quantized)) return moe_shared_expert_decode(L, xn, T, false, sh);
  const cudaStream_t s = ctx_->stream();
  const int F = int(hp_.n_ff_shexp);
  float *g = gate_.get<float>(), *u = up_.get<float>(), *y = tmp_.get<float>(), *gl = moe_logits_.get<float>();
  sh = moe_shared_term{};
  sh.y = y;
  const bool row_gate = L.shexp_gate.type == ggml_type::f32 && !xn_f16;
  if (row_gate) {
    sh.gate_row = reinterpret_cast<const float*>(L.shexp_gate.data), sh.x = xn;
  } else {
    sh.gate_logits = gl;
  }
  // xn_f16: the GEMMs read that copy, not a new one.
  TANDEM_TRY(matmul_fused({{&L.gate_shexp, g}, {&L.up_shexp, u}}, xn, T, false, xn_f16));
  if (!row_gate)
    TANDEM_TRY(xn_f16 ? matmul_fused({{&L.shexp_gate, gl}}, xn, T, false, true) : matmul(L.shexp_gate, xn, T, gl));
  TANDEM_CUDA_TRY(launch_swiglu(g, u, g, int64_t(T) * F, s));
  TANDEM_TRY(matmul(L.down_shexp, g, T, y));
  return mark("shared expert");
}

}  // namespace tandem
