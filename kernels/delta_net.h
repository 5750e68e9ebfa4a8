// Host launchers for the Gated DeltaNet layer of hybrid models (qwen35): the causal conv with its
// per-sequence state, the gated delta rule (recurrent, and chunked for long runs, with the gates and
// the q/k L2 norm folded in), the gated RMSNorm, and the pieces of gated full attention. Device pointers; each launcher enqueues on
// `stream` and returns the launch status. The math is backend/cpu/delta_net_ops.h's.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem {

// A batch's tokens as runs of one sequence each: runs[4r + 0] = first token index, [1] = tokens,
// [2] = the sequence's state slot, [3] = the position of its first token (0: the state starts at
// zero instead of being read). Tokens of a run are consecutive batch rows, in position order.
struct dn_runs {
  const int32_t* runs = nullptr;  // device, 4 ints per run
  int n_runs = 0;
  // A host-side bound on any run's token count (0: unknown). Only speed depends on it: with it the
  // conv splits long runs over several threads per channel, and the rule gives short runs (decode)
  // narrower, more numerous blocks; without, one thread walks each run and blocks are wide.
  int max_tokens = 0;
};

// out[t][c] = silu(sum_j w[c*K + j] * in[t-K+1+j][c]) over each run's rows of x (row stride
// x_stride floats), earlier inputs from conv_state + slot * (K-1) * C ([K-1][C], row K-2 newest);
// the state then holds the run's last K-1 inputs. out is [T][C] dense.
cudaError_t launch_dn_conv(const float* x, int64_t x_stride, const float* w, int C, int K, float* conv_state,
                           dn_runs runs, float* out, cudaStream_t stream);

// The gated delta rule over each run, its inputs' preparation folded in: q and k (rows of Hk heads
// × dk, stride qk_stride) are L2-normed per head (x * rsqrt(sum x^2 + l2_eps)), q then scaled by
// 1/sqrt(dk); the gates come from the raw projections alpha and beta ([T][Hv]) as delta_net_gates
// computes them (g = a_decay[h] * softplus(alpha + dt_bias[h]), beta = sigmoid(beta)); v rows of
// Hv × dv (stride v_stride). Then gated_delta_rule_recurrent: state S + slot * Hv*dk*dv
// ([Hv][dk][dv]) read once and written once per run; out [T][Hv][dv]. v-head h reads k-head
// h % Hk. dk, dv: multiples of 32 up to 256.
struct dn_rule_args {
  const float* q = nullptr;
  const float* k = nullptr;
  int64_t qk_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  const float* alpha = nullptr;  // raw ssm_alpha projections
  const float* beta = nullptr;   // raw ssm_beta projections
  int64_t gate_stride = 0;       // floats from one token's alpha (and beta) row to the next; 0: Hv
  const float* a_decay = nullptr;
  const float* dt_bias = nullptr;
  float l2_eps = 1e-6f;
  int Hk = 0, Hv = 0, dk = 0, dv = 0;
  float* S = nullptr;
  float* out = nullptr;
};
cudaError_t launch_dn_rule(const dn_rule_args& a, dn_runs runs, cudaStream_t stream);

// The same step (inputs, outputs, state handling) in the chunked WY / UT form of
// gated_delta_rule_chunked (kernels/delta_net_chunked.cu): per chunk of 64 tokens of a run, matrix
// products and a triangular solve replace the token-by-token chain, which pays off for long (prefill)
// runs. n_tok: the batch's rows, which hold every run; runs.max_tokens, unlike for launch_dn_rule,
// must bound every run's length (0: n_tok does). work: dn_rule_chunked_work_bytes(n_tok, ...) bytes
// of device memory, nothing kept between calls (56 KiB a token for Hk 16, Hv 32, dk = dv = 128).
// dk, dv: multiples of 32 up to 256.
size_t dn_rule_chunked_work_bytes(int n_tok, int Hk, int Hv, int dk, int dv);
cudaError_t launch_dn_rule_chunked(const dn_rule_args& a, dn_runs runs, int n_tok, void* work, size_t work_bytes,
                                   cudaStream_t stream);

// out = o / sqrt(mean(o^2) + eps) * w * silu(z) per row of d floats (n rows; o, z, out dense).
// With qx (d a multiple of 32) it also writes out's int8 copy for the mat-vec that reads it, as
// launch_rms_norm_q8 does: qx/ds are matvec_x_parts(work, n_in, n_tok) with n_in * n_tok = n * d.
cudaError_t launch_rms_norm_gated(const float* o, const float* w, const float* z, float* out, int64_t n, int d,
                                  float eps, cudaStream_t stream, int8_t* qx = nullptr, float2* ds = nullptr);

// Gated attention: splits attn_q's output rows (per token n_head × [q(D), gate(D)]) into q
// ([T][n_head][D]) and gate ([T][n_head][D]).
cudaError_t launch_split_q_gate(const float* qg, int T, int n_head, int D, float* q, float* gate,
                                cudaStream_t stream);
// x *= sigmoid(gate), elementwise over n floats. With qx (n a multiple of 32) it also writes x's
// int8 copy in blocks of 32, as launch_rms_norm_gated does, for the mat-vec after it (wo).
cudaError_t launch_sigmoid_mul(float* x, const float* gate, int64_t n, cudaStream_t stream, int8_t* qx = nullptr,
                               float2* ds = nullptr);

}  // namespace tandem
