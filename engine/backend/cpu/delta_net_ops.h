// The Gated DeltaNet operations of the CPU reference (qwen35's linear-attention layers): the causal
// conv with its state, the gates, q/k L2 norm, the gated delta rule in its recurrent (decode) and
// chunked (prefill) forms, and the gated RMSNorm. Plain float32; the CUDA kernels are held to these.
#pragma once

#include <cstdint>

namespace tandem {

// Depthwise causal conv over the T rows of x ([T][C], row stride x_stride floats) with kernel
// w[c*K + j] (tap j = 0 oldest), then SiLU: out[t][c] = silu(sum_j w[c][j] * in[t-K+1+j][c]),
// where inputs before row 0 come from state ([K-1][C], row K-2 the most recent). The state is then
// the last K-1 inputs (history included when T < K-1). out is [T][C], dense.
void causal_conv1d_silu(const float* x, int64_t x_stride, const float* w, int64_t T, int C, int K, float* state,
                        float* out);

// beta[i] = sigmoid(b[i]); g[i] = a_decay[h] * softplus(a[i] + dt_bias[h]) for the T×Hv gate inputs
// a and b ([T][Hv]), h = i % Hv.
void delta_net_gates(const float* a, const float* b, const float* a_decay, const float* dt_bias, int64_t T, int Hv,
                     float* g, float* beta);

// Each of n rows of d floats (stride apart) becomes x * rsqrt(sum(x^2) + eps) (Hugging Face's l2norm).
void l2_norm_rows(float* x, int64_t n, int d, int64_t stride, float eps);

// The gated delta rule over T tokens of one sequence. q, k: [T] rows of Hk heads × dk (row stride
// qk_stride floats), already L2-normed; v: [T] rows of Hv × dv (stride v_stride); g, beta: [T][Hv].
// v-head h reads k-head h % Hk. S: [Hv][dk][dv], updated in place. out: [T][Hv][dv]. q is scaled
// by 1/sqrt(dk) inside. Per token: S = exp(g) S; d = beta (v - S^T k); S += k d^T; o = S^T q.
struct delta_rule_args {
  const float* q = nullptr;
  const float* k = nullptr;
  int64_t qk_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  const float* g = nullptr;
  const float* beta = nullptr;
  int64_t T = 0;
  int Hk = 0, Hv = 0, dk = 0, dv = 0;
  float* S = nullptr;
  float* out = nullptr;
};
void gated_delta_rule_recurrent(const delta_rule_args& a);
// The same result computed chunk by chunk (WY / UT form, as in Hugging Face's
// torch_chunk_gated_delta_rule): within a chunk of `chunk` tokens the updates become small
// triangular solves and matrix products; the state passes between chunks.
void gated_delta_rule_chunked(const delta_rule_args& a, int chunk = 64);

// Per head of d values (n heads): out = o / sqrt(mean(o^2) + eps) * w * silu(z). o, z, out: [n][d].
void rms_norm_gated(const float* o, const float* w, const float* z, float* out, int64_t n, int d, float eps);

}  // namespace tandem
