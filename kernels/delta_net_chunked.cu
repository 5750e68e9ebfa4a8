// The gated delta rule in its chunked (WY / UT) form (kernels/delta_net.h, launch_dn_rule_chunked):
// for long runs the token-by-token chain of launch_dn_rule becomes per-chunk matrix products.
// fp32 on CUDA cores; the formulas are gated_delta_rule_chunked's (backend/cpu/delta_net_ops.cpp).
#include "kernels/delta_net.h"

#include "kernels/delta_net_math.cuh"

#include <cstdint>

namespace tandem {
namespace {

constexpr int k_chunk = 64;          // tokens per chunk (the CPU reference's and Hugging Face's)
constexpr int k_slab = 32;           // columns of a [chunk][dk] operand staged in shared memory at once
constexpr int k_prep_threads = 256;  // kernel A: a thread per column of the triangular solve's right side
constexpr int k_state_threads = 128;
constexpr int k_state_cols = 16;     // state columns per kernel-B block: dv / 16 blocks per (run, v-head)
constexpr int k_max_dk = 256;

using dn::sigmoid;
using dn::softplus;
using dn::warp_sum;

// What kernel A hands kernel B, indexed by batch row t (a chunk's rows are its run's rows), T rows.
struct chunk_work {
  float* qn;  // [T][Hk][dk] q / |q| / sqrt(dk)
  float* kn;  // [T][Hk][dk] k / |k|
  float* w;   // [Hv][T][dk] W = (I + L)^-1 (beta exp(c) k)
  float* u;   // [Hv][T][dv] U = (I + L)^-1 (beta v)
  float* m;   // [Hv][T][chunk] (q_i . k_j) exp(c_i - c_j) for j <= i, else 0
  float* c;   // [Hv][T] cumulative log decay from the chunk's first token
  int64_t T;
};

size_t work_floats(int64_t T, int Hk, int Hv, int dk, int dv) {
  return static_cast<size_t>(T) * (2 * static_cast<size_t>(Hk) * dk +
                                   static_cast<size_t>(Hv) * (static_cast<size_t>(dk) + dv + k_chunk + 1));
}

chunk_work carve(void* work, int64_t T, int Hk, int Hv, int dk, int dv) {
  chunk_work cw;
  cw.T = T;
  cw.qn = static_cast<float*>(work);
  cw.kn = cw.qn + T * Hk * dk;
  cw.w = cw.kn + T * Hk * dk;
  cw.u = cw.w + T * Hv * dk;
  cw.m = cw.u + T * Hv * dv;
  cw.c = cw.m + T * Hv * k_chunk;
  return cw;
}

// One block's chunk: its first batch row, its token count (<= k_chunk), its v-head and k-head.
struct chunk_pos {
  int64_t row0;
  int n;
  int h, kh;
};

// ---------------------------------------------------------------------------------------------
// Kernel A, one block per (chunk, v-head, run): everything about a chunk that does not depend on
// the state. Rows past the chunk's n tokens are zero (beta 0, k and q 0, decay 1), so a short tail
// chunk runs the same code; no exp sees a positive argument (c_i - c_j with j <= i only).
struct prep_smem {
  float ks[k_chunk][k_slab + 1];  // a slab of normalised k (stride 33: conflict-free row and column reads)
  float qs[k_chunk][k_slab + 1];
  __align__(16) float L[k_chunk][k_chunk];  // strictly lower: beta_i (k_i . k_j) exp(c_i - c_j)
  float g[k_chunk], c[k_chunk], beta[k_chunk], k_inv[k_chunk], q_inv[k_chunk];
};

// The gates from the raw projections, and c_i = g_0 + ... + g_i summed in the CPU's order.
__device__ void prep_gates(const dn_rule_args& a, const chunk_pos& p, const chunk_work& cw, prep_smem& sm) {
  const int i = threadIdx.x;
  if (i < k_chunk) {
    float g = 0.f, b = 0.f;
    if (i < p.n) {
      const int64_t gi = (p.row0 + i) * (a.gate_stride ? a.gate_stride : a.Hv) + p.h;
      g = a.a_decay[p.h] * softplus(a.alpha[gi] + a.dt_bias[p.h]);
      b = sigmoid(a.beta[gi]);
    }
    sm.g[i] = g;
    sm.beta[i] = b;
  }
  __syncthreads();
  if (i < k_chunk) {
    float cum = 0.f;
    for (int j = 0; j <= i; ++j) cum += sm.g[j];
    sm.c[i] = cum;
    if (i < p.n) cw.c[p.h * cw.T + p.row0 + i] = cum;
  }
}

// The L2 scales of the chunk's k and q rows, a warp per row; q's includes 1/sqrt(dk).
__device__ void prep_norms(const dn_rule_args& a, const chunk_pos& p, prep_smem& sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = warp; i < k_chunk; i += k_prep_threads / 32) {
    float sk = 0.f, sq = 0.f;
    if (i < p.n) {
      const int64_t off = (p.row0 + i) * a.qk_stride + static_cast<int64_t>(p.kh) * a.dk;
      for (int r = lane; r < a.dk; r += 32) {
        const float kv = a.k[off + r], qv = a.q[off + r];
        sk = fmaf(kv, kv, sk);
        sq = fmaf(qv, qv, sq);
      }
    }
    sk = warp_sum(sk), sq = warp_sum(sq);
    if (lane == 0) {
      sm.k_inv[i] = i < p.n ? rsqrtf(sk + a.l2_eps) : 0.f;
      sm.q_inv[i] = i < p.n ? rsqrtf(sq + a.l2_eps) * rsqrtf(static_cast<float>(a.dk)) : 0.f;
    }
  }
}

// K K^T and Q K^T of the normalised rows, slab by slab of dk: thread (ty, tx) holds rows 4ty..4ty+3
// and columns tx + 16m. The v-heads h < Hk also store their k-head's normalised rows for kernel B
// (every k-head any v-head reads, h % Hk, is some h' < Hk's own).
__device__ void prep_grams(const dn_rule_args& a, const chunk_pos& p, const chunk_work& cw, prep_smem& sm,
                           float (&kk)[4][4], float (&qk)[4][4]) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const bool writer = p.h < a.Hk;
#pragma unroll
  for (int x = 0; x < 4; ++x)
#pragma unroll
    for (int y = 0; y < 4; ++y) kk[x][y] = 0.f, qk[x][y] = 0.f;
  for (int r0 = 0; r0 < a.dk; r0 += k_slab) {
    __syncthreads();  // the scales are ready; the previous slab is consumed
    for (int e = threadIdx.x; e < k_chunk * k_slab; e += k_prep_threads) {
      const int i = e / k_slab, rr = e % k_slab;
      float kv = 0.f, qv = 0.f;
      if (i < p.n) {
        const int64_t off = (p.row0 + i) * a.qk_stride + static_cast<int64_t>(p.kh) * a.dk + r0 + rr;
        kv = a.k[off] * sm.k_inv[i];
        qv = a.q[off] * sm.q_inv[i];
        if (writer) {
          const int64_t dst = ((p.row0 + i) * a.Hk + p.kh) * a.dk + r0 + rr;
          cw.kn[dst] = kv;
          cw.qn[dst] = qv;
        }
      }
      sm.ks[i][rr] = kv;
      sm.qs[i][rr] = qv;
    }
    __syncthreads();
#pragma unroll 4
    for (int rr = 0; rr < k_slab; ++rr) {
      float kj[4];
#pragma unroll
      for (int y = 0; y < 4; ++y) kj[y] = sm.ks[tx + 16 * y][rr];
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const float ki = sm.ks[4 * ty + x][rr], qi = sm.qs[4 * ty + x][rr];
#pragma unroll
        for (int y = 0; y < 4; ++y) kk[x][y] = fmaf(ki, kj[y], kk[x][y]), qk[x][y] = fmaf(qi, kj[y], qk[x][y]);
      }
    }
  }
}

// L into shared memory (for the solve) and the masked decayed Q K^T into the work buffer.
__device__ void prep_masks(const chunk_pos& p, const chunk_work& cw, prep_smem& sm, const float (&kk)[4][4],
                           const float (&qk)[4][4]) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    const int i = 4 * ty + x;
    const float ci = sm.c[i], bi = sm.beta[i];
    float* mrow = cw.m + (p.h * cw.T + p.row0 + i) * k_chunk;
#pragma unroll
    for (int y = 0; y < 4; ++y) {
      const int j = tx + 16 * y;
      const float decay = j <= i ? expf(ci - sm.c[j]) : 0.f;
      sm.L[i][j] = j < i ? bi * kk[x][y] * decay : 0.f;
      if (i < p.n) mrow[j] = qk[x][y] * decay;
    }
  }
}

// (I + L) X = B by forward substitution, a thread per column of B = [beta v | beta exp(c) k]:
// the column stays in registers (both loops unroll fully) and L's rows are broadcast reads.
__device__ void prep_solve(const dn_rule_args& a, const chunk_pos& p, const chunk_work& cw, const prep_smem& sm) {
  for (int col = threadIdx.x; col < a.dv + a.dk; col += k_prep_threads) {
    const bool is_v = col < a.dv;
    const float* src = is_v ? a.v + static_cast<int64_t>(p.h) * a.dv + col
                            : a.k + static_cast<int64_t>(p.kh) * a.dk + (col - a.dv);
    const int64_t stride = is_v ? a.v_stride : a.qk_stride;
    float x[k_chunk];
#pragma unroll
    for (int i = 0; i < k_chunk; ++i) {
      const float s = is_v ? sm.beta[i] : sm.beta[i] * expf(sm.c[i]) * sm.k_inv[i];
      x[i] = i < p.n ? src[(p.row0 + i) * stride] * s : 0.f;
    }
#pragma unroll
    for (int i = 1; i < k_chunk; ++i) {
      float acc = x[i];
      const float4* l = reinterpret_cast<const float4*>(sm.L[i]);
#pragma unroll
      for (int j = 0; j < i; j += 4) {
        const float4 v = l[j / 4];
        acc = fmaf(-v.x, x[j], acc);
        if (j + 1 < i) acc = fmaf(-v.y, x[j + 1], acc);
        if (j + 2 < i) acc = fmaf(-v.z, x[j + 2], acc);
        if (j + 3 < i) acc = fmaf(-v.w, x[j + 3], acc);
      }
      x[i] = acc;
      __syncwarp();  // keeps the compiler from hoisting every row's loads of L (2016 floats) up front
    }
    const int width = is_v ? a.dv : a.dk;
    float* dst = is_v ? cw.u + (p.h * cw.T + p.row0) * a.dv + col : cw.w + (p.h * cw.T + p.row0) * a.dk + (col - a.dv);
#pragma unroll
    for (int i = 0; i < k_chunk; ++i)
      if (i < p.n) dst[static_cast<int64_t>(i) * width] = x[i];
  }
}

__global__ void __launch_bounds__(k_prep_threads)
    dn_chunk_prep_kernel(const dn_rule_args a, const int32_t* __restrict__ runs, const chunk_work cw) {
  __shared__ prep_smem sm;
  const int32_t* run = runs + 4 * blockIdx.z;
  const int t0 = run[0], n_run = run[1];
  const int cb = static_cast<int>(blockIdx.x) * k_chunk;
  if (cb >= n_run) return;  // the whole block: a chunk past this run's end
  const int h = static_cast<int>(blockIdx.y);
  const chunk_pos p{static_cast<int64_t>(t0) + cb, min(k_chunk, n_run - cb), h, h % a.Hk};
  prep_gates(a, p, cw, sm);
  prep_norms(a, p, sm);
  float kk[4][4], qk[4][4];
  prep_grams(a, p, cw, sm, kk, qk);
  prep_masks(p, cw, sm, kk, qk);
  __syncthreads();
  prep_solve(a, p, cw, sm);
}

// ---------------------------------------------------------------------------------------------
// Kernel B, one block per (run, v-head, k_state_cols columns of S): the run's chunks in order, the
// block's columns of S in shared memory (columns of the state evolve independently). Per chunk:
//   V' = U - W S,  O = exp(c) (Q S) + M V',  S = exp(c_last) S + (exp(c_last - c) k)^T V'.
// The [64][dk] operands pass through shared memory 32 columns (a slab) at a time, in the order
// W, Q, M, K; each slab is loaded into registers while the block computes on the previous one, so
// the chain of chunks waits on L2 only for the decays. Thread (tr, tc) holds rows tr + 16a (a < 4)
// and columns 2tc, 2tc+1 of the chunk's [64][16] products, and rows tr, tr + 16 of each 32-row
// slab of S in the update.
constexpr int k_slab_per_thread = k_chunk * k_slab / k_state_threads;

struct state_smem {
  __align__(16) float S[k_max_dk * k_state_cols];  // [dk][cols]
  __align__(16) float vp[k_chunk * k_state_cols];  // V' [chunk][cols]
  float stage[k_chunk][k_slab + 1];
  float ec[k_chunk], kd[k_chunk];  // exp(c_i), exp(c_last - c_i); 0 past the chunk's end
};

// Slab s of a chunk's sequence (W: s < nk, Q, M: 2 slabs, K; nk = dk / 32): its first row and the
// floats between rows.
__device__ const float* slab_src(const dn_rule_args& a, const chunk_work& cw, const chunk_pos& p, int s,
                                 int64_t& stride) {
  const int nk = a.dk / k_slab;
  const int64_t qk_row = (p.row0 * a.Hk + p.kh) * a.dk;
  stride = static_cast<int64_t>(a.Hk) * a.dk;
  if (s < nk) {
    stride = a.dk;
    return cw.w + (p.h * cw.T + p.row0) * a.dk + s * k_slab;
  }
  if (s < 2 * nk) return cw.qn + qk_row + (s - nk) * k_slab;
  if (s < 2 * nk + 2) {
    stride = k_chunk;
    return cw.m + (p.h * cw.T + p.row0) * k_chunk + (s - 2 * nk) * k_slab;
  }
  return cw.kn + qk_row + (s - 2 * nk - 2) * k_slab;
}

// This thread's share of slab s (0 past the chunk's n rows), into registers: rows i0 + 4k, column
// lane, of the 64 x 32 slab.
__device__ void load_slab(const dn_rule_args& a, const chunk_work& cw, const chunk_pos& p, int s,
                          float (&r)[k_slab_per_thread]) {
  constexpr int rows_per_pass = k_state_threads / k_slab;
  int64_t stride = 0;
  const int i0 = threadIdx.x / k_slab;
  const float* src = slab_src(a, cw, p, s, stride) + i0 * stride + threadIdx.x % k_slab;
#pragma unroll
  for (int k = 0; k < k_slab_per_thread; ++k)
    r[k] = i0 + k * rows_per_pass < p.n ? src[k * rows_per_pass * stride] : 0.f;
}

__device__ void store_slab(state_smem& sm, const float (&r)[k_slab_per_thread], const float* scale) {
  constexpr int rows_per_pass = k_state_threads / k_slab;
  const int i0 = threadIdx.x / k_slab, rr = threadIdx.x % k_slab;
#pragma unroll
  for (int k = 0; k < k_slab_per_thread; ++k) {
    const int i = i0 + k * rows_per_pass;
    sm.stage[i][rr] = scale ? r[k] * scale[i] : r[k];
  }
}

// acc[a][b] += sum_rr stage[tr + 16a][rr] * B[rr][2tc + b], B 32 rows of k_state_cols floats.
__device__ __forceinline__ void mul_slab(const state_smem& sm, const float* B, float (&acc)[4][2]) {
  const int tr = threadIdx.x / 8, tc = threadIdx.x % 8;
#pragma unroll 8
  for (int rr = 0; rr < k_slab; ++rr) {
    const float2 b = reinterpret_cast<const float2*>(B + rr * k_state_cols)[tc];
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      const float s = sm.stage[tr + 16 * x][rr];
      acc[x][0] = fmaf(s, b.x, acc[x][0]);
      acc[x][1] = fmaf(s, b.y, acc[x][1]);
    }
  }
}

// Rows r0 + tr and r0 + tr + 16 of S: decayed by the chunk, plus the staged (decayed) k slab's
// columns times V'.
__device__ __forceinline__ void update_slab(state_smem& sm, int r0, float chunk_decay) {
  const int tr = threadIdx.x / 8, tc = threadIdx.x % 8;
  float2* s0 = reinterpret_cast<float2*>(sm.S + (r0 + tr) * k_state_cols) + tc;
  float2* s1 = reinterpret_cast<float2*>(sm.S + (r0 + tr + 16) * k_state_cols) + tc;
  float2 a0 = *s0, a1 = *s1;
  a0.x *= chunk_decay, a0.y *= chunk_decay, a1.x *= chunk_decay, a1.y *= chunk_decay;
#pragma unroll 8
  for (int i = 0; i < k_chunk; ++i) {
    const float2 v = reinterpret_cast<const float2*>(sm.vp + i * k_state_cols)[tc];
    const float k0 = sm.stage[i][tr], k1 = sm.stage[i][tr + 16];
    a0.x = fmaf(k0, v.x, a0.x), a0.y = fmaf(k0, v.y, a0.y);
    a1.x = fmaf(k1, v.x, a1.x), a1.y = fmaf(k1, v.y, a1.y);
  }
  *s0 = a0, *s1 = a1;
}

// acc (W S, in this thread's tile) becomes V' = U - W S in sm.vp; acc restarts at zero.
__device__ void finish_vprime(state_smem& sm, const float2 (&u)[4], float (&acc)[4][2]) {
  const int tr = threadIdx.x / 8, tc = threadIdx.x % 8;
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    reinterpret_cast<float2*>(sm.vp + (tr + 16 * x) * k_state_cols)[tc] =
        make_float2(u[x].x - acc[x][0], u[x].y - acc[x][1]);
    acc[x][0] = acc[x][1] = 0.f;
  }
}

// The thread's U values (0 past the chunk's end), loaded early: they are needed after the W slabs.
__device__ void load_u(const dn_rule_args& a, const chunk_work& cw, const chunk_pos& p, int j0, float2 (&u)[4]) {
  const int tr = threadIdx.x / 8, tc = threadIdx.x % 8;
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    const int i = tr + 16 * x;
    u[x] = i < p.n ? reinterpret_cast<const float2*>(cw.u + (p.h * cw.T + p.row0 + i) * a.dv + j0)[tc]
                   : make_float2(0.f, 0.f);
  }
}

__device__ void write_out(const dn_rule_args& a, const chunk_pos& p, int j0, const float (&acc)[4][2]) {
  const int tr = threadIdx.x / 8, tc = threadIdx.x % 8;
#pragma unroll
  for (int x = 0; x < 4; ++x) {
    const int i = tr + 16 * x;
    if (i < p.n)
      reinterpret_cast<float2*>(a.out + ((p.row0 + i) * a.Hv + p.h) * a.dv + j0)[tc] =
          make_float2(acc[x][0], acc[x][1]);
  }
}

__device__ chunk_pos chunk_at(int t0, int n_run, int cb, int h, int Hk) {
  return {static_cast<int64_t>(t0) + cb, min(k_chunk, n_run - cb), h, h % Hk};
}

// One chunk's slabs in order; pre holds slab 0 on entry and the next chunk's slab 0 on return.
__device__ void state_chunk(const dn_rule_args& a, const chunk_work& cw, const chunk_pos& p, const chunk_pos& next,
                            bool has_next, int j0, float chunk_decay, state_smem& sm,
                            float (&pre)[k_slab_per_thread]) {
  const int nk = a.dk / k_slab, n_slabs = 3 * nk + 2;
  const int tr = threadIdx.x / 8;
  float acc[4][2] = {};
  float2 u[4];
  load_u(a, cw, p, j0, u);
  for (int s = 0; s < n_slabs; ++s) {
    __syncthreads();  // the stage is free (and V', ec, kd written before are visible)
    store_slab(sm, pre, s >= 2 * nk + 2 ? sm.kd : nullptr);
    __syncthreads();
    if (s + 1 < n_slabs)
      load_slab(a, cw, p, s + 1, pre);
    else if (has_next)
      load_slab(a, cw, next, 0, pre);
    if (s < nk) {  // W S
      mul_slab(sm, sm.S + s * k_slab * k_state_cols, acc);
      if (s == nk - 1) finish_vprime(sm, u, acc);
    } else if (s < 2 * nk) {  // Q S, then scaled by exp(c)
      mul_slab(sm, sm.S + (s - nk) * k_slab * k_state_cols, acc);
      if (s == 2 * nk - 1)
#pragma unroll
        for (int x = 0; x < 4; ++x) acc[x][0] *= sm.ec[tr + 16 * x], acc[x][1] *= sm.ec[tr + 16 * x];
    } else if (s < 2 * nk + 2) {  // + M V'
      mul_slab(sm, sm.vp + (s - 2 * nk) * k_slab * k_state_cols, acc);
      if (s == 2 * nk + 1) write_out(a, p, j0, acc);
    } else {  // the state update, 32 rows of S per slab of k
      update_slab(sm, (s - 2 * nk - 2) * k_slab, chunk_decay);
    }
  }
}

__global__ void __launch_bounds__(k_state_threads, 3)
    dn_chunk_state_kernel(const dn_rule_args a, const int32_t* __restrict__ runs, const chunk_work cw) {
  __shared__ state_smem sm;
  const int32_t* run = runs + 4 * blockIdx.z;
  const int t0 = run[0], n_run = run[1], slot = run[2], pos0 = run[3];
  if (n_run <= 0) return;  // the whole block
  const int h = static_cast<int>(blockIdx.y), j0 = static_cast<int>(blockIdx.x) * k_state_cols;
  // The block's columns of the slot's state; a run from position 0 starts from zero instead.
  float* S = a.S + (static_cast<int64_t>(slot) * a.Hv + h) * a.dk * a.dv + j0;
  for (int e = threadIdx.x; e < a.dk * k_state_cols; e += k_state_threads)
    sm.S[e] = pos0 == 0 ? 0.f : S[static_cast<int64_t>(e / k_state_cols) * a.dv + e % k_state_cols];
  float pre[k_slab_per_thread];
  chunk_pos p = chunk_at(t0, n_run, 0, h, a.Hk);
  load_slab(a, cw, p, 0, pre);
  for (int cb = 0; cb < n_run; cb += k_chunk) {
    const bool has_next = cb + k_chunk < n_run;
    const chunk_pos next = chunk_at(t0, n_run, has_next ? cb + k_chunk : cb, h, a.Hk);
    const float* c = cw.c + h * cw.T + p.row0;
    const float c_last = c[p.n - 1];
    __syncthreads();  // the previous chunk no longer reads kd (nor the state's loading is pending)
    if (threadIdx.x < k_chunk) {
      const int i = threadIdx.x;
      sm.ec[i] = i < p.n ? expf(c[i]) : 0.f;
      sm.kd[i] = i < p.n ? expf(c_last - c[i]) : 0.f;
    }
    state_chunk(a, cw, p, next, has_next, j0, expf(c_last), sm, pre);
    p = next;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < a.dk * k_state_cols; e += k_state_threads)
    S[static_cast<int64_t>(e / k_state_cols) * a.dv + e % k_state_cols] = sm.S[e];
}

bool valid_args(const dn_rule_args& a, const dn_runs& runs, int n_tok) {
  return a.Hk > 0 && a.Hv > 0 && a.Hv <= 65535 && a.dk > 0 && a.dk % 32 == 0 && a.dk <= k_max_dk && a.dv > 0 &&
         a.dv % 32 == 0 && a.dv <= 256 && a.l2_eps > 0.f && n_tok >= 0 && runs.n_runs >= 0 &&
         runs.n_runs <= 65535 && (runs.n_runs == 0 || runs.runs != nullptr);
}

}  // namespace

size_t dn_rule_chunked_work_bytes(int n_tok, int Hk, int Hv, int dk, int dv) {
  if (n_tok <= 0 || Hk <= 0 || Hv <= 0 || dk <= 0 || dv <= 0) return 0;
  return work_floats(n_tok, Hk, Hv, dk, dv) * sizeof(float);
}

cudaError_t launch_dn_rule_chunked(const dn_rule_args& a, dn_runs runs, int n_tok, void* work, size_t work_bytes,
                                   cudaStream_t stream) {
  if (!valid_args(a, runs, n_tok)) return cudaErrorInvalidValue;
  if (runs.n_runs == 0 || n_tok == 0) return cudaSuccess;
  if (work == nullptr || work_bytes < dn_rule_chunked_work_bytes(n_tok, a.Hk, a.Hv, a.dk, a.dv))
    return cudaErrorInvalidValue;
  const chunk_work cw = carve(work, n_tok, a.Hk, a.Hv, a.dk, a.dv);
  // No run is longer than the batch, so n_tok bounds the chunks when the caller gives no bound.
  const int bound = runs.max_tokens > 0 && runs.max_tokens < n_tok ? runs.max_tokens : n_tok;
  const dim3 prep_grid(static_cast<unsigned>((bound + k_chunk - 1) / k_chunk), static_cast<unsigned>(a.Hv),
                       static_cast<unsigned>(runs.n_runs));
  dn_chunk_prep_kernel<<<prep_grid, k_prep_threads, 0, stream>>>(a, runs.runs, cw);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const dim3 state_grid(static_cast<unsigned>(a.dv / k_state_cols), static_cast<unsigned>(a.Hv),
                        static_cast<unsigned>(runs.n_runs));
  dn_chunk_state_kernel<<<state_grid, k_state_threads, 0, stream>>>(a, runs.runs, cw);
  return cudaGetLastError();
}

}  // namespace tandem
