// CUDA kernels of the Gated DeltaNet layer (kernels/delta_net.h): the causal conv with its state,
// the recurrent gated delta rule (with the gates and the q/k L2 norm folded into its staging), the
// gated RMS norm, and the two small pieces of gated attention. fp32 throughout, with the formulas of backend/cpu/delta_net_ops.cpp.
#include "kernels/delta_net.h"

#include "kernels/delta_net_math.cuh"
#include "kernels/matvec_x.cuh"
#include "kernels/pdl.cuh"

#include <cstdint>

namespace tandem {
namespace {

constexpr unsigned k_full = 0xffffffffu;
constexpr int k_threads = 256;
constexpr int64_t k_max_grid = 65535;

unsigned grid_for(int64_t items) {
  const int64_t b = (items + k_threads - 1) / k_threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b < k_max_grid ? b : k_max_grid));
}

__device__ __forceinline__ float silu(float x) { return x / (1.f + expf(-x)); }
using dn::sigmoid;
using dn::softplus;
using dn::warp_sum;

// ---------------------------------------------------------------------------------------------
// Causal conv. One thread per (run, channel, slice of the run's tokens), the K-1 previous inputs
// in registers. Slices hold at least K-1 tokens, so only slice 0 reaches back into the state, and
// slice 0 alone rewrites it (after reading it): no thread reads state another one writes.
constexpr int k_conv_threads = 128;
constexpr int k_conv_slice = 16;    // target tokens per thread for long runs
constexpr int k_conv_max_slices = 64;

template <int K>
__global__ void __launch_bounds__(k_conv_threads)
    dn_conv_kernel(const float* __restrict__ x, int64_t x_stride, const float* __restrict__ w, int C,
                   float* conv_state, const int32_t* __restrict__ runs, float* __restrict__ out) {
  // Launched as a programmatic dependent of the projection that wrote x: everything but x (the
  // weights, the runs, the state this kernel wrote a step ago) loads before pdl_wait, x after it;
  // every write comes after it. The rule kernel after this one (its own dependent) may start
  // loading its state once this one triggers.
  const int c = blockIdx.x * k_conv_threads + threadIdx.x;
  const int32_t* run = runs + 4 * blockIdx.z;
  const int t0 = run[0], n = run[1], slot = run[2], pos0 = run[3];
  int per = (n + static_cast<int>(gridDim.y) - 1) / static_cast<int>(gridDim.y);
  if (per < K - 1) per = K - 1;
  const int b = static_cast<int>(blockIdx.y) * per;
  const bool live = c < C && n > 0 && b < n;
  float* st = conv_state + static_cast<int64_t>(slot) * (K - 1) * C + c;
  float wr[K], hist[K];  // hist[j], j < K-1: the run's input row b-(K-1)+j (oldest first)
  if (live) {
#pragma unroll
    for (int j = 0; j < K; ++j) wr[j] = w[static_cast<int64_t>(c) * K + j];
#pragma unroll
    for (int j = 0; j < K - 1; ++j) {
      const int r = b - (K - 1) + j;
      if (r < 0) hist[j] = pos0 == 0 ? 0.f : st[static_cast<int64_t>(K - 1 + r) * C];
    }
  }
  pdl_wait();
  pdl_trigger();
  if (!live) return;
  const int e = min(n, b + per);
#pragma unroll
  for (int j = 0; j < K - 1; ++j) {
    const int r = b - (K - 1) + j;
    if (r >= 0) hist[j] = x[static_cast<int64_t>(t0 + r) * x_stride + c];
  }
#pragma unroll 4
  for (int t = b; t < e; ++t) {
    const float xin = x[static_cast<int64_t>(t0 + t) * x_stride + c];
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < K - 1; ++j) acc += wr[j] * hist[j];
    acc += wr[K - 1] * xin;
    out[static_cast<int64_t>(t0 + t) * C + c] = silu(acc);
    if constexpr (K > 1) {
#pragma unroll
      for (int j = 0; j < K - 2; ++j) hist[j] = hist[j + 1];
      hist[K - 2] = xin;
    }
  }
  if (blockIdx.y != 0) return;
  // The new state is the run's last K-1 inputs: hist itself when slice 0 covered the whole run
  // (then it already mixes old state and new rows for n < K-1); else rows n-K+1.. of x (n > K-1).
#pragma unroll
  for (int j = 0; j < K - 1; ++j)
    st[static_cast<int64_t>(j) * C] = e == n ? hist[j] : x[static_cast<int64_t>(t0 + n - (K - 1) + j) * x_stride + c];
}

using conv_fn = void (*)(const float*, int64_t, const float*, int, float*, const int32_t*, float*);

conv_fn conv_kernel_for(int K) {
  switch (K) {
    case 1: return dn_conv_kernel<1>;
    case 2: return dn_conv_kernel<2>;
    case 3: return dn_conv_kernel<3>;
    case 4: return dn_conv_kernel<4>;
    case 5: return dn_conv_kernel<5>;
    case 6: return dn_conv_kernel<6>;
    case 7: return dn_conv_kernel<7>;
    case 8: return dn_conv_kernel<8>;
    default: return nullptr;
  }
}

// Token slices per run: one for decode or an unknown bound; long runs get ~k_conv_slice tokens
// per thread, with the grid kept small when many runs share the batch (most slices of short runs
// are empty blocks).
int conv_slices(const dn_runs& runs) {
  if (runs.max_tokens <= k_conv_slice) return 1;
  int y = (runs.max_tokens + k_conv_slice - 1) / k_conv_slice;
  if (y > k_conv_max_slices) y = k_conv_max_slices;
  const int cap = runs.n_runs > 256 ? 1 : 256 / runs.n_runs;
  return y < cap ? y : cap;
}

// ---------------------------------------------------------------------------------------------
// Elementwise and per-row kernels.

constexpr int k_row_warps = 8;  // warps (rows) per block of the per-row kernels

// A warp per row; with qx (d % 32 == 0) each pass of the warp over 32 values is one int8 block.
// PER > 0: rows of up to 32 * PER values sit in registers, all loaded at once and the weights
// before pdl_wait (they are not the predecessor's output), so a decode step's row costs one memory
// latency, not one a pass. PER == 0: any width, a loop over the row. Both sum in the same order.
template <int PER>
__global__ void __launch_bounds__(k_row_warps * 32)
    rms_norm_gated_kernel(const float* __restrict__ o, const float* __restrict__ w, const float* __restrict__ z,
                          float* __restrict__ out, int64_t n, int d, float eps, int8_t* qx, float2* ds) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * k_row_warps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const float* orow = o + r * d;
  const float* zrow = z + r * d;
  if constexpr (PER > 0) {
    float wv[PER], ov[PER], zv[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) wv[j] = lane + 32 * j < d ? w[lane + 32 * j] : 0.f;
    pdl_wait();
    pdl_trigger();  // the out projection may fetch its weights
    if (r >= n) return;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const bool in = lane + 32 * j < d;
      ov[j] = in ? orow[lane + 32 * j] : 0.f;
      zv[j] = in ? zrow[lane + 32 * j] : 0.f;
    }
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < PER; ++j) ss = fmaf(ov[j], ov[j], ss);  // a zero past d adds exactly nothing
    const float inv = 1.f / sqrtf(warp_sum(ss) / static_cast<float>(d) + eps);
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int i = lane + 32 * j;
      if (i >= d) break;  // with qx, d % 32 == 0: the whole warp breaks together
      const float v = ov[j] * inv * wv[j] * silu(zv[j]);
      out[r * d + i] = v;
      if (qx) quantize_x_warp(v, qx + r * d + (i - lane), ds + (r * d + i) / 32);
    }
  } else {
    pdl_wait();
    pdl_trigger();
    if (r >= n) return;
    float ss = 0.f;
    for (int i = lane; i < d; i += 32) ss = fmaf(orow[i], orow[i], ss);
    const float inv = 1.f / sqrtf(warp_sum(ss) / static_cast<float>(d) + eps);
    for (int i = lane; i < d; i += 32) {
      const float v = orow[i] * inv * w[i] * silu(zrow[i]);
      out[r * d + i] = v;
      if (qx) quantize_x_warp(v, qx + r * d + (i - lane), ds + (r * d + i) / 32);
    }
  }
}

__global__ void split_q_gate_kernel(const float* __restrict__ qg, int64_t n, int n_head, int D, float* __restrict__ q,
                                    float* __restrict__ gate) {
  pdl_wait();
  pdl_trigger();
  const int64_t per_tok = static_cast<int64_t>(n_head) * D;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t t = i / per_tok, rem = i % per_tok;
    const int64_t h = rem / D, d = rem % D;
    const float* src = qg + t * 2 * per_tok + h * 2 * D + d;
    q[i] = src[0];
    gate[i] = src[D];
  }
}

// With qx, n % 32 == 0 and the blocks' and the stride's multiples of 32 make every warp pass one
// whole int8 block, all lanes in.
__global__ void sigmoid_mul_kernel(float* x, const float* __restrict__ gate, int64_t n, int8_t* qx, float2* ds) {
  pdl_wait();
  pdl_trigger();  // wo may fetch its weights
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float v = x[i] * sigmoid(gate[i]);
    x[i] = v;
    if (qx) quantize_x_warp(v, qx + (i & ~int64_t(31)), ds + i / 32);
  }
}

// ---------------------------------------------------------------------------------------------
// The gated delta rule. A block of k_rule_warps warps owns one (run, v-head, slice of COLS state
// columns); each warp owns C columns, lane l rows l*R .. l*R+R-1 of them (R = dk/32), so the
// slice of S sits in registers for the whole run: read once, written once. The reductions over dk
// are warp shuffles. Token inputs (k, q, the slice's v, the gates) are staged NT tokens at a time
// in shared memory, so their load latency is paid once per NT tokens; staging also L2-normalises
// k and q and computes exp(g) and beta from the raw gate inputs (no launches of their own).
// Decode-sized runs take dn_rule_decode_kernel below instead.
constexpr int k_rule_warps = 4;

template <int R, int C_>
struct rule_cfg {
  static constexpr int DK = 32 * R;
  static constexpr int C = C_;  // columns per warp: R*C state floats per lane
  static constexpr int LOG_C = C == 8 ? 3 : C == 4 ? 2 : C == 2 ? 1 : 0;
  static constexpr int COLS = k_rule_warps * C;
  static constexpr int NT = R <= 4 ? 32 : 16;  // staged tokens: 2*NT*DK floats <= 32 KiB
};
constexpr int k_rule_decode_tokens = 8;  // runs up to this long take dn_rule_decode_kernel

// Sums each p[c] over the warp, leaving the total of column c = lane >> (5 - log2 C) in every
// lane: halving exchanges over the top lane bits (C-1 shuffles) then a butterfly over the rest,
// C-1 + 5-log2(C) shuffles instead of 5*C. p is clobbered.
template <int C>
__device__ __forceinline__ float reduce_scatter(float (&p)[C], int lane) {
#pragma unroll
  for (int half = C / 2, mask = 16; half >= 1; half /= 2, mask /= 2) {
    const bool upper = (lane & mask) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float send = upper ? p[i] : p[i + half];
      const float keep = upper ? p[i + half] : p[i];
      p[i] = keep + __shfl_xor_sync(k_full, send, mask);
    }
  }
  float v = p[0];
#pragma unroll
  for (int mask = 16 / C; mask > 0; mask /= 2) v += __shfl_xor_sync(k_full, v, mask);
  return v;
}

// R consecutive floats of shared memory (16- or 8-byte aligned when R allows the vector load).
template <int R>
__device__ __forceinline__ void load_row(const float* p, float (&r)[R]) {
  if constexpr (R % 4 == 0) {
#pragma unroll
    for (int i = 0; i < R / 4; ++i) {
      const float4 v = reinterpret_cast<const float4*>(p)[i];
      r[4 * i] = v.x, r[4 * i + 1] = v.y, r[4 * i + 2] = v.z, r[4 * i + 3] = v.w;
    }
  } else if constexpr (R % 2 == 0) {
#pragma unroll
    for (int i = 0; i < R / 2; ++i) {
      const float2 v = reinterpret_cast<const float2*>(p)[i];
      r[2 * i] = v.x, r[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < R; ++i) r[i] = p[i];
  }
}

// One token on the warp's columns: kv = S^T k with S decayed (eg * (S^T k)), d = beta (v - kv),
// S = eg S + k d^T, returns o = S^T q (q already scaled) for the lane's column. k and q come as
// staged (raw) rows with their L2 scales.
template <int R, int C, int LOG_C>
__device__ __forceinline__ float rule_step(float (&s)[R][C], const float* kp, float k_inv, const float* qp,
                                           float q_inv, float v, float eg, float beta, int lane) {
  float kr[R], qr[R], p[C];
  load_row<R>(kp, kr);
  load_row<R>(qp, qr);
#pragma unroll
  for (int r = 0; r < R; ++r) kr[r] *= k_inv, qr[r] *= q_inv;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    p[c] = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) p[c] = fmaf(s[r][c], kr[r], p[c]);
  }
  const float d = beta * (v - eg * reduce_scatter<C>(p, lane));
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const float dc = __shfl_sync(k_full, d, c << (5 - LOG_C));  // column c's delta
    p[c] = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      s[r][c] = fmaf(s[r][c], eg, kr[r] * dc);
      p[c] = fmaf(s[r][c], qr[r], p[c]);
    }
  }
  return reduce_scatter<C>(p, lane);
}

// Shared staging of NT tokens: raw k and q rows of the k-head, v of the block's columns, exp(g),
// beta and the L2 scales of k and q (q's times 1/sqrt(dk)).
template <int DK, int NT, int COLS>
struct rule_stage {
  __align__(16) float k[NT * DK];
  __align__(16) float q[NT * DK];
  float v[NT * COLS];
  float eg[NT], beta[NT], k_inv[NT], q_inv[NT];
};

template <typename cfg>
__device__ __forceinline__ void stage_tokens(const dn_rule_args& a, int64_t row0, int nt, int kh, int h, int j0,
                                             rule_stage<cfg::DK, cfg::NT, cfg::COLS>& st) {
  constexpr int DK = cfg::DK, COLS = cfg::COLS;
  const float* kb = a.k + static_cast<int64_t>(kh) * DK;
  const float* qb = a.q + static_cast<int64_t>(kh) * DK;
#pragma unroll 4
  for (int e = threadIdx.x; e < nt * DK; e += k_rule_warps * 32) {
    const int tok = e / DK, i = e % DK;
    const int64_t off = (row0 + tok) * a.qk_stride + i;
    st.k[e] = kb[off];
    st.q[e] = qb[off];
  }
  const float* vb = a.v + static_cast<int64_t>(h) * a.dv + j0;
  for (int e = threadIdx.x; e < nt * COLS; e += k_rule_warps * 32) {
    const int tok = e / COLS, j = e % COLS;
    st.v[e] = vb[(row0 + tok) * a.v_stride + j];
  }
  if (static_cast<int>(threadIdx.x) < nt) {  // the gates, as delta_net_gates computes them
    const int64_t gi = (row0 + threadIdx.x) * (a.gate_stride ? a.gate_stride : a.Hv) + h;
    st.eg[threadIdx.x] = expf(a.a_decay[h] * softplus(a.alpha[gi] + a.dt_bias[h]));
    st.beta[threadIdx.x] = sigmoid(a.beta[gi]);
  }
  __syncthreads();
  // x * rsqrt(sum(x^2) + eps) per staged row (Hugging Face's l2norm), a warp per token.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int tok = warp; tok < nt; tok += k_rule_warps) {
    float sk = 0.f, sq = 0.f;
    for (int i = lane; i < DK; i += 32) {
      sk = fmaf(st.k[tok * DK + i], st.k[tok * DK + i], sk);
      sq = fmaf(st.q[tok * DK + i], st.q[tok * DK + i], sq);
    }
    sk = warp_sum(sk), sq = warp_sum(sq);
    if (lane == 0) {
      st.k_inv[tok] = rsqrtf(sk + a.l2_eps);
      st.q_inv[tok] = rsqrtf(sq + a.l2_eps) * rsqrtf(static_cast<float>(DK));
    }
  }
}

template <int R, int C>
__global__ void __launch_bounds__(k_rule_warps * 32) dn_rule_kernel(const dn_rule_args a, const int32_t* runs) {
  using cfg = rule_cfg<R, C>;
  constexpr int DK = cfg::DK, LOG_C = cfg::LOG_C, COLS = cfg::COLS, NT = cfg::NT;
  __shared__ rule_stage<DK, NT, COLS> st;
  const int32_t* run = runs + 4 * blockIdx.z;
  const int t0 = run[0], n = run[1], slot = run[2], pos0 = run[3];
  if (n <= 0) return;  // the whole block
  const int h = blockIdx.y, kh = h % a.Hk;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int j0 = blockIdx.x * COLS, jw = j0 + warp * C;
  // This lane's rows of the warp's columns; a run from position 0 starts from zero, not the slot.
  float* S = a.S + (static_cast<int64_t>(slot) * a.Hv + h) * DK * a.dv + static_cast<int64_t>(lane) * R * a.dv + jw;
  float s[R][C];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) s[r][c] = pos0 == 0 ? 0.f : S[static_cast<int64_t>(r) * a.dv + c];
  const int col = lane >> (5 - LOG_C);                       // the column reduce_scatter leaves here
  const bool writer = (lane & ((32 >> LOG_C) - 1)) == 0;     // one lane per column writes o
  float* out = a.out + static_cast<int64_t>(h) * a.dv + jw + col;
  for (int c0 = 0; c0 < n; c0 += NT) {
    const int nt = min(NT, n - c0);
    if (c0 > 0) __syncthreads();  // the previous chunk is consumed
    stage_tokens<cfg>(a, static_cast<int64_t>(t0) + c0, nt, kh, h, j0, st);
    __syncthreads();
    for (int tt = 0; tt < nt; ++tt) {
      const float o = rule_step<R, C, LOG_C>(s, st.k + tt * DK + lane * R, st.k_inv[tt], st.q + tt * DK + lane * R,
                                             st.q_inv[tt], st.v[tt * COLS + warp * C + col], st.eg[tt],
                                             st.beta[tt], lane);
      if (writer) out[(static_cast<int64_t>(t0) + c0 + tt) * a.Hv * a.dv] = o;
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c) S[static_cast<int64_t>(r) * a.dv + c] = s[r][c];
}

template <int R, int C>
cudaError_t launch_rule_cols(const dn_rule_args& a, const dn_runs& runs, cudaStream_t stream) {
  using cfg = rule_cfg<R, C>;
  if (a.dv % cfg::COLS != 0) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(a.dv / cfg::COLS), static_cast<unsigned>(a.Hv),
                  static_cast<unsigned>(runs.n_runs));
  dn_rule_kernel<R, C><<<grid, k_rule_warps * 32, 0, stream>>>(a, runs.runs);
  return cudaGetLastError();
}

// Decode-sized runs (up to k_rule_decode_tokens): a block of k_dec_warps warps owns 32 state
// columns of one (run, v-head), lane l column j0 + l and warp w rows w RT .. w RT + RT - 1. A
// warp's load or store of a state row is then one 128-byte line: the block above, whose lanes
// take rows, touched a line per lane for 8 bytes of it, and one token's pass over a 2 MiB state
// ran at ~0.3 TB/s (15 us a layer, the largest launch of a Qwen3.5 MoE decode layer). The sums
// over dk cross the warps through shared memory. The state's loads go out before pdl_wait: only
// this layer's previous step wrote it.
constexpr int k_dec_warps = 8;

template <int R>
__global__ void __launch_bounds__(k_dec_warps * 32) dn_rule_decode_kernel(const dn_rule_args a, const int32_t* runs) {
  constexpr int DK = 32 * R, RT = DK / k_dec_warps;
  __shared__ float kq[2][DK];                  // the token's raw k and q
  __shared__ float part[2][k_dec_warps][32];   // the warps' partial S^T k, then S^T q
  __shared__ float scal[4];                    // k's and q's L2 scales, exp(g), beta
  const int32_t* run = runs + 4 * blockIdx.z;
  const int t0 = run[0], n = run[1], slot = run[2], pos0 = run[3];
  if (n <= 0) return;  // the whole block
  const int h = blockIdx.y, kh = h % a.Hk, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int j = blockIdx.x * 32 + lane, r0 = warp * RT;
  float* S = a.S + (static_cast<int64_t>(slot) * a.Hv + h) * DK * a.dv + static_cast<int64_t>(r0) * a.dv + j;
  float s[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r) s[r] = pos0 == 0 ? 0.f : S[static_cast<int64_t>(r) * a.dv];
  pdl_wait();
  pdl_trigger();  // the gated norm after this kernel may start its launch
  // Three barriers a token; none is needed at its top: the previous token read kq, part[0] and
  // most of scal before its last barrier, and part[1] and scal[1] (warp 0) after it but before
  // this token's first, which every write of them here follows.
  for (int t = 0; t < n; ++t) {
    const int64_t row = static_cast<int64_t>(t0) + t;
    for (int e = threadIdx.x; e < DK; e += k_dec_warps * 32) {
      kq[0][e] = a.k[row * a.qk_stride + static_cast<int64_t>(kh) * DK + e];
      kq[1][e] = a.q[row * a.qk_stride + static_cast<int64_t>(kh) * DK + e];
    }
    const float v = a.v[row * a.v_stride + static_cast<int64_t>(h) * a.dv + j];
    __syncthreads();
    if (warp < 2) {  // x * rsqrt(sum(x^2) + eps) (Hugging Face's l2norm); q's also by 1/sqrt(dk)
      float ss = 0.f;
      for (int i = lane; i < DK; i += 32) ss = fmaf(kq[warp][i], kq[warp][i], ss);
      ss = warp_sum(ss);
      if (lane == 0) scal[warp] = rsqrtf(ss + a.l2_eps) * (warp == 1 ? rsqrtf(static_cast<float>(DK)) : 1.f);
    } else if (warp == 2 && lane == 0) {  // the gates, as delta_net_gates computes them
      const int64_t gi = row * (a.gate_stride ? a.gate_stride : a.Hv) + h;
      scal[2] = expf(a.a_decay[h] * softplus(a.alpha[gi] + a.dt_bias[h]));
      scal[3] = sigmoid(a.beta[gi]);
    }
    float p = 0.f;
#pragma unroll
    for (int r = 0; r < RT; ++r) p = fmaf(s[r], kq[0][r0 + r], p);
    part[0][warp][lane] = p;
    __syncthreads();
    const float k_inv = scal[0], eg = scal[2];
    float kv = 0.f;
#pragma unroll
    for (int w = 0; w < k_dec_warps; ++w) kv += part[0][w][lane];
    const float d = scal[3] * (v - eg * (kv * k_inv));
    float o = 0.f;
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      s[r] = fmaf(s[r], eg, kq[0][r0 + r] * k_inv * d);
      o = fmaf(s[r], kq[1][r0 + r], o);
    }
    part[1][warp][lane] = o;
    __syncthreads();
    if (warp == 0) {
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < k_dec_warps; ++w) sum += part[1][w][lane];
      a.out[(row * a.Hv + h) * a.dv + j] = sum * scal[1];
    }
  }
#pragma unroll
  for (int r = 0; r < RT; ++r) S[static_cast<int64_t>(r) * a.dv] = s[r];
}

template <int R>
cudaError_t launch_rule(const dn_rule_args& a, const dn_runs& runs, cudaStream_t stream) {
  if (runs.max_tokens > 0 && runs.max_tokens <= k_rule_decode_tokens) {
    const dim3 grid(static_cast<unsigned>(a.dv / 32), static_cast<unsigned>(a.Hv), static_cast<unsigned>(runs.n_runs));
    return launch_pdl(dn_rule_decode_kernel<R>, grid, dim3(k_dec_warps * 32), stream, a, runs.runs);
  }
  return launch_rule_cols<R, (R <= 4 ? 8 : 4)>(a, runs, stream);
}

bool valid_runs(const dn_runs& runs) {
  return runs.n_runs >= 0 && runs.n_runs <= 65535 && (runs.n_runs == 0 || runs.runs != nullptr);
}

}  // namespace

cudaError_t launch_dn_conv(const float* x, int64_t x_stride, const float* w, int C, int K, float* conv_state,
                           dn_runs runs, float* out, cudaStream_t stream) {
  const conv_fn kernel = conv_kernel_for(K);
  if (kernel == nullptr || C <= 0 || x_stride < C || !valid_runs(runs)) return cudaErrorInvalidValue;
  if (runs.n_runs == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((C + k_conv_threads - 1) / k_conv_threads),
                  static_cast<unsigned>(conv_slices(runs)), static_cast<unsigned>(runs.n_runs));
  return launch_pdl(kernel, grid, dim3(k_conv_threads), stream, x, x_stride, w, C, conv_state, runs.runs, out);
}

cudaError_t launch_dn_rule(const dn_rule_args& a, dn_runs runs, cudaStream_t stream) {
  if (a.Hk <= 0 || a.Hv <= 0 || a.Hv > 65535 || a.dv <= 0 || a.dv % 32 != 0 || a.dk % 32 != 0 || !valid_runs(runs) ||
      !(a.l2_eps > 0.f))
    return cudaErrorInvalidValue;
  if (runs.n_runs == 0) return cudaSuccess;
  switch (a.dk / 32) {
    case 1: return launch_rule<1>(a, runs, stream);
    case 2: return launch_rule<2>(a, runs, stream);
    case 3: return launch_rule<3>(a, runs, stream);
    case 4: return launch_rule<4>(a, runs, stream);
    case 5: return launch_rule<5>(a, runs, stream);
    case 6: return launch_rule<6>(a, runs, stream);
    case 7: return launch_rule<7>(a, runs, stream);
    case 8: return launch_rule<8>(a, runs, stream);
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t launch_rms_norm_gated(const float* o, const float* w, const float* z, float* out, int64_t n, int d,
                                  float eps, cudaStream_t stream, int8_t* qx, float2* ds) {
  const int64_t blocks = (n + k_row_warps - 1) / k_row_warps;
  if (n < 0 || d <= 0 || blocks > 0x7fffffff || (qx && (d % 32 != 0 || !ds))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(blocks)), block(k_row_warps * 32);
  if (d <= 128) return launch_pdl(rms_norm_gated_kernel<4>, grid, block, stream, o, w, z, out, n, d, eps, qx, ds);
  if (d <= 256) return launch_pdl(rms_norm_gated_kernel<8>, grid, block, stream, o, w, z, out, n, d, eps, qx, ds);
  return launch_pdl(rms_norm_gated_kernel<0>, grid, block, stream, o, w, z, out, n, d, eps, qx, ds);
}

cudaError_t launch_split_q_gate(const float* qg, int T, int n_head, int D, float* q, float* gate,
                                cudaStream_t stream) {
  if (T < 0 || n_head <= 0 || D <= 0) return cudaErrorInvalidValue;
  const int64_t n = static_cast<int64_t>(T) * n_head * D;
  if (n == 0) return cudaSuccess;
  return launch_pdl(split_q_gate_kernel, dim3(grid_for(n)), dim3(k_threads), stream, qg, n, n_head, D, q, gate);
}

cudaError_t launch_sigmoid_mul(float* x, const float* gate, int64_t n, cudaStream_t stream, int8_t* qx, float2* ds) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  if (qx && (n % 32 != 0 || !ds)) return cudaErrorInvalidValue;
  return launch_pdl(sigmoid_mul_kernel, dim3(grid_for(n)), dim3(k_threads), stream, x, gate, n, qx, ds);
}

}  // namespace tandem
