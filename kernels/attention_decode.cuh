// Device pieces shared by the split-K decode attention kernels (kernels/attention.cu: loads from
// the paged cache; kernels/attention_deep.cu: tensor-core blocks on staged tiles): row loads, the run
// update of the online softmax, and the end of a block (per-split partials, the last split's merge).
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/matvec_x.cuh"
#include "kernels/quant_blocks.cuh"

namespace tandem {
namespace {

constexpr int k_warps = 4;
constexpr int k_max_split = k_paged_max_splits;
// Keys a warp loads at once in the decode kernel (8 measured: +0.5% at 1-128 keys, -0.8% at
// 1-2048 on an H200, for 1.7x the registers).
constexpr int k_keys = 4;
// Splits are only used for fewer (token, head) pairs than this: one arrival counter per pair,
// at the start of the workspace.
constexpr int k_split_counters = 1024;

template <int N>
__device__ __forceinline__ void load_row(const uint16_t* p, float (&o)[N]) {
  if constexpr (N == 8) {
    const uint4 q = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      o[2 * i] = f.x, o[2 * i + 1] = f.y;
    }
  } else if constexpr (N == 4) {
    const uint2 q = *reinterpret_cast<const uint2*>(p);
    const uint32_t w[2] = {q.x, q.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      o[2 * i] = f.x, o[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] = fp16_to_float(p[i]);
  }
}

template <int N>
__device__ __forceinline__ void load_row(const float* p, float (&o)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) o[i] = p[i];
}

// Marks a cache of Q8_0 rows: each head's row is head_dim/32 blocks of 34 bytes (blocks.h).
struct q8_row {};

// The DPL values of lane `lane` from row `row` ([slot][kv head] index) of a cache of T.
template <int DPL, class T>
__device__ __forceinline__ void load_kv(const void* cache, int64_t row, int lane, float (&o)[DPL]) {
  load_row(static_cast<const T*>(cache) + row * (32 * DPL) + lane * DPL, o);
}

// Q8_0: a lane's DPL values sit inside one block (32 % DPL == 0); value = d · q as dequantize_row.
template <int DPL>
__device__ __forceinline__ void load_kv_q8(const void* cache, int64_t row, int lane, float (&o)[DPL]) {
  const uint8_t* blk = static_cast<const uint8_t*>(cache) + row * (DPL * 34) + (lane * DPL / 32) * 34;
  const float d = fp16_to_float(*reinterpret_cast<const uint16_t*>(blk));
  const int8_t* qs = reinterpret_cast<const int8_t*>(blk + 2) + (lane * DPL) % 32;
  if constexpr (DPL % 2 == 0) {
#pragma unroll
    for (int i = 0; i < DPL / 2; ++i) {  // 2-byte loads: blocks are only 2-byte aligned
      const uint16_t pair = *reinterpret_cast<const uint16_t*>(qs + 2 * i);
      o[2 * i] = d * static_cast<float>(static_cast<int8_t>(pair & 0xff));
      o[2 * i + 1] = d * static_cast<float>(static_cast<int8_t>(pair >> 8));
    }
  } else {
#pragma unroll
    for (int i = 0; i < DPL; ++i) o[i] = d * static_cast<float>(qs[i]);
  }
}

template <>
__device__ __forceinline__ void load_kv<1, q8_row>(const void* c, int64_t row, int lane, float (&o)[1]) {
  load_kv_q8<1>(c, row, lane, o);
}
template <>
__device__ __forceinline__ void load_kv<2, q8_row>(const void* c, int64_t row, int lane, float (&o)[2]) {
  load_kv_q8<2>(c, row, lane, o);
}
template <>
__device__ __forceinline__ void load_kv<4, q8_row>(const void* c, int64_t row, int lane, float (&o)[4]) {
  load_kv_q8<4>(c, row, lane, o);
}
template <>
__device__ __forceinline__ void load_kv<8, q8_row>(const void* c, int64_t row, int lane, float (&o)[8]) {
  load_kv_q8<8>(c, row, lane, o);
}

// The max (Max) or sum of v over the block's k_warps warps, in every thread. s_red: k_warps
// floats, free again on return.
template <bool Max>
__device__ __forceinline__ float block_reduce(float v, float* s_red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = Max ? fmaxf(v, w) : v + w;
  }
  if (threadIdx.x % 32 == 0) s_red[threadIdx.x / 32] = v;
  __syncthreads();
  float r = s_red[0];
#pragma unroll
  for (int w = 1; w < k_warps; ++w) r = Max ? fmaxf(r, s_red[w]) : r + s_red[w];
  __syncthreads();
  return r;
}

// Lane `lane`'s DPL values of a split's partial row, through L2 (other blocks wrote it during
// this launch). Rows are head_dim + 2 floats, so 8-byte loads are the widest always aligned.
template <int DPL>
__device__ __forceinline__ void load_partial(const float* row, int lane, float (&o)[DPL]) {
  if constexpr (DPL == 1) {
    o[0] = __ldcg(row + lane);
  } else {
#pragma unroll
    for (int i = 0; i < DPL / 2; ++i) {
      const float2 f = __ldcg(reinterpret_cast<const float2*>(row + lane * DPL) + i);
      o[2 * i] = f.x, o[2 * i + 1] = f.y;
    }
  }
}

// Merges the splits of one (token, head) with the block's threads: out = sum_s O_s e^{m_s - M}
// / sum_s l_s e^{m_s - M} over the splits that saw keys. Up to k_max_split splits (deep caches
// take over a hundred): thread s loads split s's (m, l), so they come in one round trip; then
// warp w sums splits w, w + k_warps, ... with each lane holding its DPL dims, issuing the rows of
// U splits before using them, and the warps' sums meet in s_acc (the kernel's warp merge buffer,
// free by now). A loop of dependent loads cost two round trips per split
// (Qwen3-8B shape, decode over 1-2048 keys on an H200: 352 -> 377 tokens/s without it). Not
// inlined: inlined, it moved the key loop's register allocation (f32 cache, head_dim 128: 64 ->
// 72 registers, 8 -> 7 blocks per SM); called, it has no stack frame and the kernels keep their
// budgets in tests/kernels/occupancy_budget.txt.
template <int DPL>
__device__ __noinline__ void combine_splits(const float* part, int64_t head, int pos, int n_split, int chunk,
                                            float (*s_acc)[32 * DPL], float* out, int8_t* out_q, float2* out_ds) {
  constexpr int D = 32 * DPL, stride = D + 2, U = 4;  // U: splits a warp has in flight
  static_assert(k_max_split <= 32 * k_warps, "one thread per split's (m, l)");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int used = min(n_split, (pos + chunk) / chunk);  // splits that saw keys
  const float* p = part + head * n_split * stride;
  __shared__ float s_e[32 * k_warps], s_red[k_warps];
  const int s = threadIdx.x;
  const float m = s < used ? __ldcg(p + s * stride + D) : -INFINITY;
  const float l = s < used ? __ldcg(p + s * stride + D + 1) : 0.f;
  const float M = block_reduce<true>(m, s_red);
  const float e = s < used && l > 0.f ? expf(m - M) : 0.f;
  s_e[s] = e;
  const float L = block_reduce<false>(l * e, s_red);  // its barrier also publishes s_e
  float o[DPL];
#pragma unroll
  for (int i = 0; i < DPL; ++i) o[i] = 0.f;
  for (int s0 = warp; s0 < used; s0 += U * k_warps) {
    float v[U][DPL];
#pragma unroll
    for (int u = 0; u < U; ++u) load_partial<DPL>(p + min(s0 + u * k_warps, used - 1) * stride, lane, v[u]);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float w = s0 + u * k_warps < used ? s_e[s0 + u * k_warps] : 0.f;  // past the end: weight 0
#pragma unroll
      for (int i = 0; i < DPL; ++i) o[i] = fmaf(w, v[u][i], o[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < DPL; ++i) s_acc[warp][lane * DPL + i] = o[i];
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < k_warps; ++w) sum += s_acc[w][d];
    const float v = sum / L;
    out[head * D + d] = v;
    // Warps cover 32 consecutive d (head_dim % 32 == 0): one int8 block of the token's row.
    if (out_q) quantize_x_warp(v, out_q + head * D + (d & ~31), out_ds + (head * D + d) / 32);
  }
}

// One step of reduce_scatter for N values left: the upper half of lanes (lane & off) keeps the
// upper half of the values, hands the lower to the lane `off` away, and the next step halves N.
// A template recursion, so that every index into x is a constant and x stays in registers (an
// outer loop over N left it in local memory, which missed L1 when the kernel took shared memory).
template <int N, int V>
__device__ __forceinline__ void scatter_step(float (&x)[V], int lane, int off) {
  if constexpr (N > 1) {
    const bool hi = lane & off;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float lo_v = x[i], hi_v = x[N / 2 + i];
      x[i] = (hi ? hi_v : lo_v) + __shfl_xor_sync(0xffffffffu, hi ? lo_v : hi_v, off);
    }
    scatter_step<N / 2>(x, lane, off >> 1);
  }
}

// Sums V values over a warp's lanes in 2V - 1 + log2(32 / V) shuffles (V a power of two <= 32):
// each step hands half of the remaining values to the lane `off` away and keeps the other half,
// so lane L ends with the sum of value L / (32 / V). x is clobbered.
template <int V>
__device__ __forceinline__ float reduce_scatter(float (&x)[V], int lane) {
  static_assert(V >= 1 && V <= 32 && (V & (V - 1)) == 0, "a power of two of at most 32 values");
  scatter_step<V>(x, lane, 16);
  float r = x[0];
#pragma unroll
  for (int off = 16 / V; off > 0; off >>= 1) r += __shfl_xor_sync(0xffffffffu, r, off);
  return r;
}

// The [slot][kv head] row of key j of a sequence (table: its block table row) for KV head kvh.
__device__ __forceinline__ int64_t kv_row(const paged_attention_args& a, const int32_t* table, int j, int kvh) {
  return (static_cast<int64_t>(table[j / a.block_size]) * a.block_size + j % a.block_size) * a.n_head_kv + kvh;
}

// The query heads one decode block takes: the G = n_head / n_head_kv heads of a KV head are cut
// into n_sub blocks of at most GM heads, so each K/V row a block loads serves up to GM heads.
struct head_group {
  int t, kvh, h0, g;  // token, KV head, first query head, heads
};
template <int GM>
__device__ __forceinline__ head_group group_of(const paged_attention_args& a, int bx) {
  const int G = a.n_head / a.n_head_kv, n_sub = (G + GM - 1) / GM, hs = (G + n_sub - 1) / n_sub;
  const int per_tok = a.n_head_kv * n_sub, r = bx % per_tok, kvh = r / n_sub, sub = r % n_sub;
  return {bx / per_tok, kvh, kvh * G + sub * hs, min(hs, G - sub * hs)};
}

// The keys of a decode block's split: token hg.t's position, the splits its keys use, and split
// blockIdx.y's keys [begin, end); false when the token has no keys here (a slot with no query, or
// a split past them). Splits past the token's keys are not counted: the grid's splits are sized
// for the step's bucket of keys (graph reuse), and a short context then merges only the splits
// it uses, or none (one split writes its output directly).
struct split_keys {
  int pos, used, begin, end;
};
__device__ __forceinline__ bool split_of(const paged_attention_args& a, const head_group& hg, int n_split, int chunk,
                                         split_keys& k) {
  k.pos = a.tok_pos[hg.t];
  if (k.pos < 0) return false;
  const int n_kv = k.pos + 1;
  k.used = min(n_split, (n_kv + chunk - 1) / chunk);
  if (static_cast<int>(blockIdx.y) >= k.used) return false;
  k.begin = blockIdx.y * chunk;
  k.end = min(k.begin + chunk, n_kv);
  return true;
}

// The group's scaled queries (lane's DPL dims of each head; heads past hg.g are zeros) and the
// online softmax's empty state.
template <int DPL, int GM>
__device__ __forceinline__ void start_group(const paged_attention_args& a, const head_group& hg, int lane,
                                            float (&q)[GM][DPL], float (&acc)[GM][DPL], float (&m)[GM],
                                            float (&l)[GM]) {
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    const float* qrow = a.q + (static_cast<int64_t>(hg.t) * a.n_head + hg.h0 + g) * (32 * DPL) + lane * DPL;
#pragma unroll
    for (int i = 0; i < DPL; ++i) q[g][i] = g < hg.g ? qrow[i] * a.scale : 0.f, acc[g][i] = 0.f;
    m[g] = -INFINITY, l[g] = 0.f;
  }
}

// combine_splits for one head with one warp, so that a grouped block's last split merges its
// heads side by side (one after another, the tail of a deep layer grew by a merge per head):
// lane s holds splits s, s + 32, ... of (m, l); their weights go through s_e, and the lanes'
// DPL dims through s_row (D floats) for the int8 copy, which wants 32 consecutive values a warp.
template <int DPL>
__device__ void combine_head_warp(const float* part, int64_t head, int pos, int n_split, int chunk, float* s_e,
                                  float* s_row, float* out, int8_t* out_q, float2* out_ds) {
  constexpr int D = 32 * DPL, stride = D + 2, U = 8, S = k_max_split / 32;
  const int lane = threadIdx.x % 32;
  const int used = min(n_split, (pos + chunk) / chunk);
  const float* p = part + head * n_split * stride;
  float m[S], l[S], M = -INFINITY;
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const int s = lane + 32 * k;
    m[k] = s < used ? __ldcg(p + s * stride + D) : -INFINITY;
    l[k] = s < used ? __ldcg(p + s * stride + D + 1) : 0.f;
    M = fmaxf(M, m[k]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
  float L = 0.f;
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const float e = l[k] > 0.f ? expf(m[k] - M) : 0.f;
    s_e[lane + 32 * k] = e;
    L = fmaf(l[k], e, L);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
  __syncwarp();
  float o[DPL];
#pragma unroll
  for (int i = 0; i < DPL; ++i) o[i] = 0.f;
  for (int s0 = 0; s0 < used; s0 += U) {
    float v[U][DPL];
#pragma unroll
    for (int u = 0; u < U; ++u) load_partial<DPL>(p + min(s0 + u, used - 1) * stride, lane, v[u]);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float w = s0 + u < used ? s_e[s0 + u] : 0.f;  // past the end: weight 0
#pragma unroll
      for (int i = 0; i < DPL; ++i) o[i] = fmaf(w, v[u][i], o[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < DPL; ++i) {
    out[head * D + lane * DPL + i] = o[i] / L;
    s_row[lane * DPL + i] = o[i] / L;
  }
  if (!out_q) return;
  __syncwarp();
  for (int d0 = 0; d0 < D; d0 += 32)
    quantize_x_warp(s_row[d0 + lane], out_q + head * D + d0, out_ds + (head * D + d0) / 32);
}

// The end of a decode block: its warps' online-softmax states meet per head, then one split
// writes the output directly, or else its partials, and the last split of the group to finish
// merges every head's partials (no second launch).
template <int DPL, int GM>
__device__ __forceinline__ void finish_group(const paged_attention_args& a, const head_group& hg, int used,
                                             int n_split, int pos, int chunk, float* part, const float (&m)[GM],
                                             const float (&l)[GM], const float (&acc)[GM][DPL]) {
  constexpr int D = 32 * DPL;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __shared__ float s_m[k_warps][GM], s_l[k_warps][GM];
  __shared__ float s_acc[k_warps * GM][D];  // row w * GM + g; rows 0..k_warps-1 reused by the merge
  if (lane == 0)
#pragma unroll
    for (int g = 0; g < GM; ++g) s_m[warp][g] = m[g], s_l[warp][g] = l[g];
#pragma unroll
  for (int g = 0; g < GM; ++g)
#pragma unroll
    for (int i = 0; i < DPL; ++i) s_acc[warp * GM + g][lane * DPL + i] = acc[g][i];
  __syncthreads();
  const int n_g = GM == 1 ? 1 : hg.g;
  for (int g = 0; g < n_g; ++g) {  // each warp rescales to the block's max
    float mb = -INFINITY;
#pragma unroll
    for (int w = 0; w < k_warps; ++w) mb = fmaxf(mb, s_m[w][g]);
    float lb = 0.f, f[k_warps];
#pragma unroll
    for (int w = 0; w < k_warps; ++w) {
      f[w] = s_l[w][g] > 0.f ? expf(s_m[w][g] - mb) : 0.f;
      lb += s_l[w][g] * f[w];
    }
    const int64_t head = static_cast<int64_t>(hg.t) * a.n_head + hg.h0 + g;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
      float o = 0.f;
#pragma unroll
      for (int w = 0; w < k_warps; ++w) o += s_acc[w * GM + g][d] * f[w];
      if (used == 1) {
        const float v = o / lb;
        a.out[head * D + d] = v;
        // Warps cover 32 consecutive d: one int8 block of the token's row.
        if (a.out_q) quantize_x_warp(v, a.out_q + head * D + (d & ~31), a.out_ds + (head * D + d) / 32);
      } else {
        part[(head * n_split + blockIdx.y) * (D + 2) + d] = o;
      }
    }
    if (used > 1 && threadIdx.x == 0) {
      float* pm = part + (head * n_split + blockIdx.y) * (D + 2) + D;
      pm[0] = mb, pm[1] = lb;
    }
  }
  if (used == 1) return;
  // Its partials are visible to the last split once every block has fenced its writes before
  // counting itself in; the group's counter is its first head's.
  const int64_t head0 = static_cast<int64_t>(hg.t) * a.n_head + hg.h0;
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    auto* counter = reinterpret_cast<unsigned*>(part) - k_split_counters + head0;
    last = atomicAdd(counter, 1u) == static_cast<unsigned>(used - 1);
    if (last) *counter = 0u;  // left zero for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  if constexpr (GM == 1) {
    combine_splits<DPL>(part, head0, pos, n_split, chunk, s_acc, a.out, a.out_q, a.out_ds);
  } else {
    __shared__ float s_e[GM][k_max_split];
    for (int g = warp; g < hg.g; g += k_warps)  // a warp per head (GM = 8: two each)
      combine_head_warp<DPL>(part, head0 + g, pos, n_split, chunk, s_e[g], s_acc[g], a.out, a.out_q, a.out_ds);
  }
}

// One run of KK keys of a warp (K rows kr, V rows vr, lanes holding DPL dims each) folded into
// the GM heads' online softmax; keys u >= n_live are masked. The run's scores, value v = g * KK
// + u, are summed over the lanes by a reduce-scatter: lane L then holds the score of value L /
// LPV, so each lane takes one exp where it took V, and the sums take 2V - 1 + log2 LPV shuffles
// where they took 5V, plus V to hand the weights back.
template <int DPL, int GM, int KK>
__device__ __forceinline__ void attend_run(const float (&q)[GM][DPL], const float (&kr)[KK][DPL],
                                           const float (&vr)[KK][DPL], int n_live, int lane, float (&m)[GM],
                                           float (&l)[GM], float (&acc)[GM][DPL]) {
  constexpr int V = GM * KK, LPV = 32 / V;
  float sv[V];
#pragma unroll
  for (int g = 0; g < GM; ++g)
#pragma unroll
    for (int u = 0; u < KK; ++u) {
      float d = 0.f;
#pragma unroll
      for (int i = 0; i < DPL; ++i) d = fmaf(q[g][i], kr[u][i], d);
      sv[g * KK + u] = d;
    }
  const int vi = lane / LPV, ug = vi % KK, gl = vi / KK;  // this lane's value, its key and head
  const bool live = ug < n_live;
  const float sum = reduce_scatter<V>(sv, lane);  // every lane: the shuffles take the whole warp
  const float sc = live ? sum : -INFINITY;
  float mx = sc;  // the run's max for head gl: over the lanes of its KK keys
#pragma unroll
  for (int o = LPV; o < LPV * KK; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float m_new[GM], m_mine = -INFINITY;
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    m_new[g] = fmaxf(m[g], __shfl_sync(0xffffffffu, mx, g * KK * LPV));
    if (gl == g) m_mine = m_new[g];
  }
  const float pv = live ? expf(sc - m_mine) : 0.f;
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    const float corr = expf(m[g] - m_new[g]);  // 0 while m is -inf
    float p[KK], psum = 0.f;
#pragma unroll
    for (int u = 0; u < KK; ++u) p[u] = __shfl_sync(0xffffffffu, pv, (g * KK + u) * LPV), psum += p[u];
    l[g] = l[g] * corr + psum;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      float v = acc[g][i] * corr;
#pragma unroll
      for (int u = 0; u < KK; ++u) v = fmaf(p[u], vr[u][i], v);
      acc[g][i] = v;
    }
    m[g] = m_new[g];
  }
}

}  // namespace

// The deep-cache decode kernel (kernels/attention_deep.cu): K/V tiles staged in shared memory
// by cp.async, all query heads of a KV head a block. Same splits, workspace and output as the
// grouped kernel; false from paged_deep_supported where it has no instance (head_dim).
bool paged_deep_supported(const paged_attention_args& a);
cudaError_t launch_paged_deep(const paged_attention_args& a, int n_split, int chunk, float* work,
                              cudaStream_t stream);

}  // namespace tandem
