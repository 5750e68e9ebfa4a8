// The gated delta rule in its chunked (WY / UT) form (kernels/delta_net.h, launch_dn_rule_chunked):
// for long runs the token-by-token chain of launch_dn_rule becomes per-chunk matrix products.
// Both kernels run on tf32 tensor cores at fp32 accuracy on sm_80+ (3xTF32; kernel A in
// delta_net_chunked_prep.cuh), on CUDA cores in fp32 else; the formulas are gated_delta_rule_chunked's
// (backend/cpu/delta_net_ops.cpp).
#include "kernels/delta_net.h"

#include "kernels/arch.h"
#include "kernels/cp_async.cuh"
#include "kernels/delta_net_chunked_mma.cuh"
#include "kernels/delta_net_math.cuh"
#include "kernels/pdl.cuh"

#include <atomic>
#include <cstdint>
#include <cstdlib>

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

// The L2 scales of the chunk's k and q rows, q's including 1/sqrt(dk): four threads a row, all
// loads issued before the first sum needs one (a warp a row waited a memory latency a row).
__device__ void prep_norms(const dn_rule_args& a, const chunk_pos& p, prep_smem& sm) {
  static_assert(k_prep_threads == 4 * k_chunk, "four threads a row");
  const int i = threadIdx.x / 4, part = threadIdx.x % 4;
  float sk = 0.f, sq = 0.f;
  if (i < p.n) {
    const int64_t off = (p.row0 + i) * a.qk_stride + static_cast<int64_t>(p.kh) * a.dk + part;
    constexpr int per_pass = 16;  // 64 columns: 32 loads in flight a thread
    for (int m0 = 0; 4 * m0 < a.dk; m0 += per_pass) {
      float kv[per_pass], qv[per_pass];
#pragma unroll
      for (int m = 0; m < per_pass; ++m) {
        const bool in = 4 * (m0 + m) < a.dk;
        kv[m] = in ? a.k[off + 4 * (m0 + m)] : 0.f;
        qv[m] = in ? a.q[off + 4 * (m0 + m)] : 0.f;
      }
#pragma unroll
      for (int m = 0; m < per_pass; ++m) sk = fmaf(kv[m], kv[m], sk), sq = fmaf(qv[m], qv[m], sq);
    }
  }
#pragma unroll
  for (int o = 1; o < 4; o <<= 1)
    sk += __shfl_xor_sync(0xffffffffu, sk, o), sq += __shfl_xor_sync(0xffffffffu, sq, o);
  if (part == 0) {
    sm.k_inv[i] = i < p.n ? rsqrtf(sk + a.l2_eps) : 0.f;
    sm.q_inv[i] = i < p.n ? rsqrtf(sq + a.l2_eps) * rsqrtf(static_cast<float>(a.dk)) : 0.f;
  }
}

// This thread's elements of the raw k and q slab at column r0: (i, rr) = (e / 32, e % 32) for
// e = threadIdx.x + 256 j, zero past the chunk's n rows.
constexpr int k_prep_slab_per_thread = k_chunk * k_slab / k_prep_threads;
__device__ void load_prep_slab(const dn_rule_args& a, const chunk_pos& p, int r0, float (&kr)[k_prep_slab_per_thread],
                               float (&qr)[k_prep_slab_per_thread]) {
#pragma unroll
  for (int j = 0; j < k_prep_slab_per_thread; ++j) {
    const int e = threadIdx.x + j * k_prep_threads, i = e / k_slab;
    const int64_t off = (p.row0 + i) * a.qk_stride + static_cast<int64_t>(p.kh) * a.dk + r0 + e % k_slab;
    kr[j] = i < p.n ? a.k[off] : 0.f;
    qr[j] = i < p.n ? a.q[off] : 0.f;
  }
}

// K K^T and Q K^T of the normalised rows, slab by slab of dk: thread (ty, tx) holds rows 4ty..4ty+3
// and columns tx + 16m. Each slab is loaded into registers while the block computes on the previous
// one. The v-heads h < Hk also store their k-head's normalised rows for kernel B (every k-head any
// v-head reads, h % Hk, is some h' < Hk's own).
__device__ void prep_grams(const dn_rule_args& a, const chunk_pos& p, const chunk_work& cw, prep_smem& sm,
                           float (&kk)[4][4], float (&qk)[4][4]) {
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const bool writer = p.h < a.Hk;
#pragma unroll
  for (int x = 0; x < 4; ++x)
#pragma unroll
    for (int y = 0; y < 4; ++y) kk[x][y] = 0.f, qk[x][y] = 0.f;
  float kr[k_prep_slab_per_thread], qr[k_prep_slab_per_thread];
  load_prep_slab(a, p, 0, kr, qr);
  for (int r0 = 0; r0 < a.dk; r0 += k_slab) {
    __syncthreads();  // the scales are ready; the previous slab is consumed
#pragma unroll
    for (int j = 0; j < k_prep_slab_per_thread; ++j) {
      const int e = threadIdx.x + j * k_prep_threads, i = e / k_slab, rr = e % k_slab;
      const float kv = kr[j] * sm.k_inv[i], qv = qr[j] * sm.q_inv[i];
      if (writer && i < p.n) {
        const int64_t dst = ((p.row0 + i) * a.Hk + p.kh) * a.dk + r0 + rr;
        cw.kn[dst] = kv;
        cw.qn[dst] = qv;
      }
      sm.ks[i][rr] = kv;
      sm.qs[i][rr] = qv;
    }
    __syncthreads();
    if (r0 + k_slab < a.dk) load_prep_slab(a, p, r0 + k_slab, kr, qr);
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
  pdl_wait();
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
  pdl_wait();
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

// ---------------------------------------------------------------------------------------------
// Kernel B on tensor cores (sm_80+), one block of 8 warps per (run, v-head, 32 columns of S): the
// same per-chunk products as above, each a sum of 16 x 8 x 8 warp products in 3xTF32 (fp32-level
// error, delta_net_chunked_mma.cuh). A chunk is two phases between barriers:
//   1. warp (rt, ct) = (warp % 4, warp / 4) computes rows 16 rt.. and columns 16 ct.. (two 8-column
//      tiles) of both W S and Q S, so each S fragment feeds two products; V' = U - W S goes to
//      shared memory, exp(c) Q S stays in registers;
//   2. the same warp adds M V' to its output tile and writes it; then warp w updates S's 16-row
//      tiles w, w + 8, .. (all 32 columns): S = exp(c_last) S + (exp(c_last - c) k)^T V'.
// The operands come in by cp.async a phase ahead: the next chunk's W and Q while phase 2 runs (their
// buffers are free once phase 1 is done), its M and K during the next phase 1. So a chunk waits on
// memory only when the previous phase was shorter than a load; the fp32 kernel above waits on each
// of 14 slabs. S stays fp32 in shared memory and is split into tf32 parts as it is read.
constexpr int k_mma_threads = 256;
constexpr int k_mma_cols = 32;
// Row strides (floats) of the shared operands, chosen so that each fragment load hits 32 banks:
// row-indexed loads (row g, column t) want a stride of 4 mod 32, column-indexed ones (row t, column
// g: S, V', K^T) 8 mod 32. All are multiples of 4, as cp.async's 16-byte rows need.
constexpr int k_sv_stride = k_mma_cols + 8;
constexpr int k_m_stride = k_chunk + 4;

// Float offsets of kernel B's dynamic shared memory for a given dk.
struct mma_smem {
  int wq_stride, k_stride;
  int w, q, k, m, s, vp, ec, kd, dec, total;
};

__host__ __device__ inline mma_smem mma_smem_for(int dk) {
  mma_smem l;
  l.wq_stride = dk + 4, l.k_stride = dk + 8;
  l.w = 0;
  l.q = l.w + k_chunk * l.wq_stride;
  l.k = l.q + k_chunk * l.wq_stride;
  l.m = l.k + k_chunk * l.k_stride;
  l.s = l.m + k_chunk * k_m_stride;    // S [dk][32]
  l.vp = l.s + dk * k_sv_stride;       // V' [chunk][32]
  l.ec = l.vp + k_chunk * k_sv_stride;  // exp(c_i), two chunks' (by parity)
  l.kd = l.ec + 2 * k_chunk;           // exp(c_last - c_i), likewise
  l.dec = l.kd + 2 * k_chunk;          // exp(c_last), likewise
  l.total = l.dec + 4;
  return l;
}

// The device pieces of the kernel below, compiled where its body is (sm_80+) and in the host pass.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
// Rows [0, 64) x cols floats of src (rows `stride` floats apart) into dst (ld apart) by cp.async;
// rows from n on are zero-filled (a short last chunk), never read.
// (Row and column step on from one division a call: a division a copy was ~15% of kernel B's
// instructions, and it issue-bounds.)
__device__ void stage_rows(float* dst, int ld, const float* src, int64_t stride, int cols, int n) {
  const int per_row = cols / 4, di = k_mma_threads / per_row, dc = k_mma_threads % per_row;
  int i = threadIdx.x / per_row, c = threadIdx.x % per_row;
  while (i < k_chunk) {
    const bool in = i < n;
    cp_async16(dst + i * ld + 4 * c, in ? src + i * stride + 4 * c : src, in ? 16 : 0);
    i += di, c += dc;
    if (c >= per_row) c -= per_row, ++i;
  }
}

__device__ void stage_wq(const dn_rule_args& a, const chunk_work& cw, const chunk_pos& p, float* sm,
                         const mma_smem& l) {
  stage_rows(sm + l.w, l.wq_stride, cw.w + (p.h * cw.T + p.row0) * a.dk, a.dk, a.dk, p.n);
  stage_rows(sm + l.q, l.wq_stride, cw.qn + (p.row0 * a.Hk + p.kh) * a.dk, static_cast<int64_t>(a.Hk) * a.dk,
             a.dk, p.n);
}

__device__ void stage_mk(const dn_rule_args& a, const chunk_work& cw, const chunk_pos& p, float* sm,
                         const mma_smem& l) {
  stage_rows(sm + l.m, k_m_stride, cw.m + (p.h * cw.T + p.row0) * k_chunk, k_chunk, k_chunk, p.n);
  stage_rows(sm + l.k, l.k_stride, cw.kn + (p.row0 * a.Hk + p.kh) * a.dk, static_cast<int64_t>(a.Hk) * a.dk,
             a.dk, p.n);
}

// Threads < 64: c_i of chunk p (0 past its end) and c_last, read a phase before store_decays needs them.
__device__ float2 load_c(const chunk_work& cw, const chunk_pos& p) {
  const int i = threadIdx.x;
  if (i >= k_chunk) return make_float2(0.f, 0.f);
  const float* c = cw.c + p.h * cw.T + p.row0;
  return make_float2(i < p.n ? c[i] : 0.f, c[p.n - 1]);
}

__device__ void store_decays(float2 c, const chunk_pos& p, float* sm, const mma_smem& l, int parity) {
  const int i = threadIdx.x;
  if (i >= k_chunk) return;
  sm[l.ec + parity * k_chunk + i] = i < p.n ? expf(c.x) : 0.f;
  sm[l.kd + parity * k_chunk + i] = i < p.n ? expf(c.y - c.x) : 0.f;
  if (i == 0) sm[l.dec + parity] = expf(c.y);
}

// This lane's U values in its phase-1 tile's C layout (0 past the chunk's end).
__device__ void load_u_frag(const dn_rule_args& a, const chunk_work& cw, const chunk_pos& p, int j0,
                            float (&u)[2][4]) {
  const int warp = threadIdx.x / 32, r0 = 16 * (warp % 4), n0 = 16 * (warp / 4);
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = r0 + dn::frag_c_row(2 * hf);
      const float2 x = r < p.n ? *reinterpret_cast<const float2*>(cw.u + (p.h * cw.T + p.row0 + r) * a.dv + j0 +
                                                                   n0 + 8 * nt + dn::frag_c_col(0))
                               : make_float2(0.f, 0.f);
      u[nt][2 * hf] = x.x, u[nt][2 * hf + 1] = x.y;
    }
}

// Phase 1: v = W S and o = Q S on the warp's tile, then V' = U - v into shared memory, o scaled by exp(c).
__device__ void mma_phase1(float* sm, const mma_smem& l, int dk, int parity, const float (&u)[2][4],
                           float (&o)[2][4]) {
  const int warp = threadIdx.x / 32, r0 = 16 * (warp % 4), n0 = 16 * (warp / 4);
  float v[2][4] = {};
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) o[nt][i] = 0.f;
  const float* W = sm + l.w + r0 * l.wq_stride;
  const float* Q = sm + l.q + r0 * l.wq_stride;
  const float* S = sm + l.s + n0;
#pragma unroll 2
  for (int k0 = 0; k0 < dk; k0 += 8) {
    const dn::tf32_a aw = dn::frag_a(W + k0, l.wq_stride), aq = dn::frag_a(Q + k0, l.wq_stride);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const dn::tf32_b b = dn::frag_b(S + k0 * k_sv_stride + 8 * nt, k_sv_stride);
      dn::mma_3xtf32(v[nt], aw, b);
      dn::mma_3xtf32(o[nt], aq, b);
    }
  }
  const float* ec = sm + l.ec + parity * k_chunk;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = r0 + dn::frag_c_row(2 * hf);
      *reinterpret_cast<float2*>(sm + l.vp + r * k_sv_stride + n0 + 8 * nt + dn::frag_c_col(0)) =
          make_float2(u[nt][2 * hf] - v[nt][2 * hf], u[nt][2 * hf + 1] - v[nt][2 * hf + 1]);
      o[nt][2 * hf] *= ec[r], o[nt][2 * hf + 1] *= ec[r];
    }
}

// Phase 2a: o += M V' (M is lower triangular: the warp's rows see V' rows up to its last only), and
// the chunk's rows of o out.
__device__ void mma_outputs(const dn_rule_args& a, const float* sm, const mma_smem& l, const chunk_pos& p, int j0,
                            float (&o)[2][4]) {
  const int warp = threadIdx.x / 32, r0 = 16 * (warp % 4), n0 = 16 * (warp / 4);
  const float* M = sm + l.m + r0 * k_m_stride;
  const float* V = sm + l.vp + n0;
  for (int k0 = 0; k0 < r0 + 16; k0 += 8) {
    const dn::tf32_a am = dn::frag_a(M + k0, k_m_stride);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) dn::mma_3xtf32(o[nt], am, dn::frag_b(V + k0 * k_sv_stride + 8 * nt, k_sv_stride));
  }
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = r0 + dn::frag_c_row(2 * hf);
    if (r >= p.n) continue;
    float* dst = a.out + ((p.row0 + r) * a.Hv + p.h) * a.dv + j0 + n0 + dn::frag_c_col(0);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
      *reinterpret_cast<float2*>(dst + 8 * nt) = make_float2(o[nt][2 * hf], o[nt][2 * hf + 1]);
  }
}

// Phase 2b: S = exp(c_last) S + K^T (exp(c_last - c) V'), warp w on S's 16-row tiles w, w + 8, ..;
// only the chunk's n token rows contribute (the rest are zero).
__device__ void mma_update(float* sm, const mma_smem& l, int dk, int n, int parity) {
  const int warp = threadIdx.x / 32;
  const float decay = sm[l.dec + parity];
  const float* kd = sm + l.kd + parity * k_chunk;
  for (int mt = warp; mt < dk / 16; mt += k_mma_threads / 32) {
    float acc[4][4];
    float* S = sm + l.s + 16 * mt * k_sv_stride;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const float2 s =
            *reinterpret_cast<const float2*>(S + dn::frag_c_row(2 * hf) * k_sv_stride + 8 * nt + dn::frag_c_col(0));
        acc[nt][2 * hf] = decay * s.x, acc[nt][2 * hf + 1] = decay * s.y;
      }
    for (int k0 = 0; k0 < n; k0 += 8) {
      const dn::tf32_a ak = dn::frag_a_t(sm + l.k + k0 * l.k_stride + 16 * mt, l.k_stride);
      const float s0 = kd[k0 + dn::lane_t()], s1 = kd[k0 + dn::lane_t() + 4];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        dn::mma_3xtf32(acc[nt], ak, dn::frag_b(sm + l.vp + k0 * k_sv_stride + 8 * nt, k_sv_stride, s0, s1));
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
        *reinterpret_cast<float2*>(S + dn::frag_c_row(2 * hf) * k_sv_stride + 8 * nt + dn::frag_c_col(0)) =
            make_float2(acc[nt][2 * hf], acc[nt][2 * hf + 1]);
  }
}

// The block's 32 columns of the slot's state between global (dv wide) and shared memory (a run
// from position 0 starts from zero instead).
__device__ void mma_state_io(const dn_rule_args& a, float* S, float* sm, const mma_smem& l, bool load, bool zero) {
  for (int e = threadIdx.x; e < a.dk * k_mma_cols; e += k_mma_threads) {
    const int r = e / k_mma_cols, c = e % k_mma_cols;
    float& s = sm[l.s + r * k_sv_stride + c];
    if (load)
      s = zero ? 0.f : S[static_cast<int64_t>(r) * a.dv + c];
    else
      S[static_cast<int64_t>(r) * a.dv + c] = s;
  }
}

#endif

#include "kernels/delta_net_chunked_prep.cuh"

__global__ void __launch_bounds__(k_mma_threads, 1)
    dn_chunk_state_mma_kernel(const dn_rule_args a, const int32_t* __restrict__ runs, const chunk_work cw) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(16) float smem[];
  pdl_wait();
  const int32_t* run = runs + 4 * blockIdx.z;
  const int t0 = run[0], n_run = run[1], slot = run[2], pos0 = run[3];
  if (n_run <= 0) return;  // the whole block
  const mma_smem l = mma_smem_for(a.dk);
  const int h = static_cast<int>(blockIdx.y), j0 = static_cast<int>(blockIdx.x) * k_mma_cols;
  float* S = a.S + (static_cast<int64_t>(slot) * a.Hv + h) * a.dk * a.dv + j0;
  chunk_pos p = chunk_at(t0, n_run, 0, h, a.Hk);
  stage_wq(a, cw, p, smem, l);
  cp_async_commit();
  stage_mk(a, cw, p, smem, l);
  cp_async_commit();
  mma_state_io(a, S, smem, l, true, pos0 == 0);
  float u[2][4];
  load_u_frag(a, cw, p, j0, u);
  store_decays(load_c(cw, p), p, smem, l, 0);
  for (int cb = 0, parity = 0; cb < n_run; cb += k_chunk, parity ^= 1) {
    const bool has_next = cb + k_chunk < n_run;
    const chunk_pos next = chunk_at(t0, n_run, has_next ? cb + k_chunk : cb, h, a.Hk);
    cp_async_wait<1>();  // this chunk's W and Q (its M and K may still be in flight)
    __syncthreads();     // everyone's W, Q; S, the decays, and the last chunk's reads of V' done
    float o[2][4];
    mma_phase1(smem, l, a.dk, parity, u, o);
    cp_async_wait<0>();
    __syncthreads();  // M, K and V' ready; S, W and Q no longer read
    if (has_next) stage_wq(a, cw, next, smem, l);
    cp_async_commit();
    float2 c_next = make_float2(0.f, 0.f);
    if (has_next) load_u_frag(a, cw, next, j0, u), c_next = load_c(cw, next);
    mma_outputs(a, smem, l, p, j0, o);
    mma_update(smem, l, a.dk, p.n, parity);
    if (has_next) store_decays(c_next, next, smem, l, parity ^ 1);
    __syncthreads();  // S updated; M, K and V' no longer read
    if (has_next) stage_mk(a, cw, next, smem, l);
    cp_async_commit();
    p = next;
  }
  mma_state_io(a, S, smem, l, false, false);
#endif
}

// Which kernels launch_dn_rule_chunked runs (dn_rule_chunked_debug).
std::atomic<int> g_parts{3}, g_mma{-1};  // kernel A's: g_prep (delta_net_chunked_prep.cuh)

// Kernel B on tensor cores unless turned off (TANDEM_DN_CHUNKED_MMA=0, or the debug hook), the
// kernels were built below sm_80, its shared memory (dk 128: 148 KiB) is more than a block may have
// (dk over 128 on an A100, over 192 on an H100: those take the fp32 kernel), or work is misaligned
// for cp.async.
bool use_mma_state(const dn_rule_args& a, const void* work) {
  static const bool env_off = env_is_zero("TANDEM_DN_CHUNKED_MMA");
  const int mode = g_mma.load(std::memory_order_relaxed);
  if (mode == 0 || (mode < 0 && env_off) || kernel_arch() < 80) return false;
  const int bytes = mma_smem_for(a.dk).total * static_cast<int>(sizeof(float));
  return bytes <= kernel_smem_optin() && reinterpret_cast<uintptr_t>(work) % 16 == 0 &&
         allow_dynamic_smem_once<dn_chunk_state_mma_kernel>(kernel_smem_optin()) == cudaSuccess;
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
  const int parts = g_parts.load(std::memory_order_relaxed);
  // No run is longer than the batch, so n_tok bounds the chunks when the caller gives no bound.
  const int bound = runs.max_tokens > 0 && runs.max_tokens < n_tok ? runs.max_tokens : n_tok;
  const dim3 prep_grid(static_cast<unsigned>((bound + k_chunk - 1) / k_chunk), static_cast<unsigned>(a.Hv),
                       static_cast<unsigned>(runs.n_runs));
  if (parts & 1) {
    const cudaError_t e =
        use_mma_prep(a, work, bound)
            ? launch_pdl_shared(dn_chunk_prep_mma_kernel, prep_grid, dim3(k_prep_threads),
                                prep_mma_smem_for(a.dk, a.dv).total * sizeof(float), stream, a, runs.runs, cw)
            : launch_pdl(dn_chunk_prep_kernel, prep_grid, dim3(k_prep_threads), stream, a, runs.runs, cw);
    if (e != cudaSuccess) return e;
  }
  if (!(parts & 2)) return cudaSuccess;
  if (use_mma_state(a, work)) {
    const dim3 grid(static_cast<unsigned>(a.dv / k_mma_cols), static_cast<unsigned>(a.Hv),
                    static_cast<unsigned>(runs.n_runs));
    return launch_pdl_shared(dn_chunk_state_mma_kernel, grid, dim3(k_mma_threads),
                             mma_smem_for(a.dk).total * sizeof(float), stream, a, runs.runs, cw);
  }
  const dim3 state_grid(static_cast<unsigned>(a.dv / k_state_cols), static_cast<unsigned>(a.Hv),
                        static_cast<unsigned>(runs.n_runs));
  return launch_pdl(dn_chunk_state_kernel, state_grid, dim3(k_state_threads), stream, a, runs.runs, cw);
}

// Test and timing hooks, declared where they are used (tests/kernels/delta_net_test.cpp).
// dn_rule_chunked_debug: which kernels launch_dn_rule_chunked launches from now on (parts: bit 0
// kernel A, bit 1 kernel B; 3, the default, both), which kernel B (mma: 0 the fp32 one, 1 the
// tensor-core one where it can run, -1 the default choice) and which kernel A (prep, likewise);
// dn_chunked_mma_tile_test: one dn::mma_tile_test_kernel product (cudaErrorNotSupported below sm_80).
void dn_rule_chunked_debug(int parts, int mma, int prep);
cudaError_t dn_chunked_mma_tile_test(const float* a, const float* at, const float* b, const float* bt,
                                     const float* s, const float* c0, float* c, cudaStream_t stream);

void dn_rule_chunked_debug(int parts, int mma, int prep) {
  g_parts.store(parts, std::memory_order_relaxed);
  g_mma.store(mma, std::memory_order_relaxed);
  g_prep.store(prep, std::memory_order_relaxed);
}

cudaError_t dn_chunked_mma_tile_test(const float* a, const float* at, const float* b, const float* bt,
                                     const float* s, const float* c0, float* c, cudaStream_t stream) {
  if (kernel_arch() < 80) return cudaErrorNotSupported;
  dn::mma_tile_test_kernel<<<1, 32, 0, stream>>>(a, at, b, bt, s, c0, c);
  return cudaGetLastError();
}

}  // namespace tandem
