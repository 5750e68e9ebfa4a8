// Host launcher for the mixture-of-experts half of a decode layer as one persistent launch: the
// FFN norm, the router, routing, the k experts' gate/up and the shared expert, SwiGLU, down, the
// weighted sum into the residual and the next layer's input norm, with grid barriers between them
// instead of seven dependent launches. Opt-in (TANDEM_MOE_PERSISTENT=1, engine/backend/cuda/cuda_moe_block.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/moe.h"
#include "quant/ggml_type.h"

namespace tandem {

// One token's MoE FFN. Weights in GGUF layout; every pointer a device pointer.
struct moe_decode_layer_args {
  float* x = nullptr;              // the residual: x += the FFN's output
  const float* norm_w = nullptr;   // the FFN norm's weights: the FFN reads RMSNorm(x) * norm_w
  float eps = 0.f;
  int64_t n_embd = 0;
  const float* router = nullptr;  // float32, n_expert rows of n_embd
  int n_expert = 0, k = 0;
  bool renorm = false;           // divide the k weights by their sum (launch_moe_route's rule)
  ggml_type gate_up_type = ggml_type::f32;
  const void* gate = nullptr;    // expert e's n_ff rows of n_embd at gate + e * gate_up_stride
  const void* up = nullptr;
  size_t gate_up_stride = 0;
  ggml_type down_type = ggml_type::f32;
  const void* down = nullptr;    // expert e's n_embd rows of n_ff at down + e * down_stride
  size_t down_stride = 0;
  int64_t n_ff = 0;
  // The shared expert (n_ff_shexp 0: none): gate and up of gate_up_type, down of down_type, and
  // the float32 row of its sigmoid gate.
  const void* shexp_gate = nullptr;
  const void* shexp_up = nullptr;
  const void* shexp_down = nullptr;
  const float* shexp_gate_row = nullptr;
  int64_t n_ff_shexp = 0;
  moe_next_norm next;            // the next layer's input norm (as launch_moe_combine_norm); w null: none
  int32_t* ids = nullptr;        // the selection (k ids and weights), for whoever reads it after
  float* weights = nullptr;
  void* work = nullptr;          // moe_decode_layer_work_bytes, zeroed once by moe_decode_layer_reset
};

// Whether the launch takes these shapes and types on the current device: gate/up and down of
// Q4_K, Q5_K, Q6_K or Q8_0 (the shared expert's of the same two types); n_embd a multiple of 256
// whose gate/up rows are at most 64 of the mat-vec's pieces (Q4_K: 4096; the others: 2048), and
// 1024 or more with a next norm; eps and next.eps >= 0; n_ff and n_ff_shexp multiples of 256 whose SwiGLU
// outputs (k * n_ff + n_ff_shexp floats) fit k_moe_decode_layer_max_h; n_expert <=
// k_moe_max_experts, 1 <= k <= min(n_expert, k_moe_max_k); 16-byte aligned pointers and
// strides; a device that launches cooperative kernels, running sm_70+ code.
constexpr int k_moe_decode_layer_max_h = 10240;
bool moe_decode_layer_fits(const moe_decode_layer_args& a);

// Scratch of the launch: two grid-sync words, the logits and the gate/up products.
size_t moe_decode_layer_work_bytes(int n_expert, int k, int64_t n_ff, int64_t n_ff_shexp);

// Zeroes the grid-sync words of work; once, before its first launch (the launches leave them so).
cudaError_t moe_decode_layer_reset(void* work, cudaStream_t stream);

// With xn = RMSNorm(x) * norm_w (each block makes it and its int8 copy in shared memory, as
// launch_rms_norm_q8 does for rows of 1024 and more: the same bits there): x += sum_j w_j
// down_j(h_j) + sigmoid(g) down_s(h_s), h = silu(gate xn) * up xn, for the k experts routed by
// launch_moe_route's rule from router · xn (float32 products) and the shared expert gated by g =
// shexp_gate_row · xn; then, with next.w, next.xn = RMSNorm(x) * next.w and its int8 copy
// (matvec_x_parts(next.work, n_embd, 1)). Gate and up read xn's int8 copy as the expert mat-vec
// does; down reads h as floats (the launch chain quantizes h to int8), so the result differs from
// the chain's by that rounding. One cooperative launch of a block or two per multiprocessor
// (programmatic dependent on sm_90); the weights of each phase are asked into L2 as soon as their
// addresses are known (the router's and the shared expert's before the previous kernel ends, the
// selected experts' once routing is done). cudaErrorInvalidValue where moe_decode_layer_fits
// refuses. Its blocks wait for each other, so two such launches must not run at once on one
// device (two streams or processes could each hold part of the GPU); one stream's launches
// follow each other.
cudaError_t launch_moe_decode_layer(const moe_decode_layer_args& a, cudaStream_t stream);

// Tests only: the layer's grid synchronisation alone, in a launch shaped as the layer's (grid in
// grid: one or two blocks an SM). Each of `rounds` rounds block b writes r * grid + b into vals
// (2 * grid ints), passes a grid barrier and adds what block (b + 1) % grid wrote; out[b] = its
// sum, then the last block to finish adds 1 to out[grid] (grid + 1 ints, out[grid] zero before).
// work: moe_decode_layer_reset's first 16 bytes (zeroed once).
cudaError_t moe_decode_layer_sync_check(int* vals, int* out, int rounds, void* work, int& grid, cudaStream_t stream);

}  // namespace tandem
