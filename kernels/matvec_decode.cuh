// Per-lane decoding of one mat-vec "unit" (32 or 64 weights of a GGUF block) into float
// registers, shared by the warp-per-row and the staged mat-vec kernels. Included only by matvec.cu.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/quant_blocks.cuh"

namespace tandem {
namespace mv {

// Unquantized rows seen as 32-element "blocks" so they share the kernels with the quant types.
struct f32_unit {
  float v[32];
};
struct f16_unit {
  uint16_t v[32];
};

// How a type's block splits into lane work units: `per_block` units of `elems` weights; the
// weights of a unit lie at x offsets r * run_stride + i (r < elems / run_len, i < run_len)
// from the unit's base element.
template <class B>
struct unit_traits;
template <class B>
struct small_unit_traits {
  static constexpr int qk = 32, per_block = 1, elems = 32, run_len = 32, run_stride = 0;
};
template <> struct unit_traits<f32_unit> : small_unit_traits<f32_unit> {};
template <> struct unit_traits<f16_unit> : small_unit_traits<f16_unit> {};
template <> struct unit_traits<block_q4_0> : small_unit_traits<block_q4_0> {};
template <> struct unit_traits<block_q4_1> : small_unit_traits<block_q4_1> {};
template <> struct unit_traits<block_q5_0> : small_unit_traits<block_q5_0> {};
template <> struct unit_traits<block_q5_1> : small_unit_traits<block_q5_1> {};
template <> struct unit_traits<block_q8_0> : small_unit_traits<block_q8_0> {};
// Q4_K/Q5_K: a unit is one 64-weight group (two sub-blocks sharing 32 qs bytes).
template <>
struct unit_traits<block_q4_k> {
  static constexpr int qk = 256, per_block = 4, elems = 64, run_len = 64, run_stride = 0;
};
template <>
struct unit_traits<block_q5_k> {
  static constexpr int qk = 256, per_block = 4, elems = 64, run_len = 64, run_stride = 0;
};
// Q6_K: a unit is 16 l-values of one 128-weight half across its four quarters, so each ql/qh
// byte is read by exactly one lane.
template <>
struct unit_traits<block_q6_k> {
  static constexpr int qk = 256, per_block = 4, elems = 64, run_len = 16, run_stride = 32;
};

__device__ __forceinline__ int unit_base(const block_q4_k*, int s) { return 64 * s; }
__device__ __forceinline__ int unit_base(const block_q5_k*, int s) { return 64 * s; }
__device__ __forceinline__ int unit_base(const block_q6_k*, int s) { return 128 * (s / 2) + 16 * (s % 2); }
template <class B>
__device__ __forceinline__ int unit_base(const B*, int) { return 0; }

// Loads through the read-only cache: blocks read straight from global memory.
struct global_ld {
  static __device__ __forceinline__ uint32_t u16(const void* p) { return __ldg(static_cast<const unsigned short*>(p)); }
  static __device__ __forceinline__ uint4 u128(const void* p) { return __ldg(static_cast<const uint4*>(p)); }
  static __device__ __forceinline__ float4 f128(const void* p) { return __ldg(static_cast<const float4*>(p)); }
};
// Plain loads: blocks already staged in shared memory.
struct plain_ld {
  static __device__ __forceinline__ uint32_t u16(const void* p) { return *static_cast<const unsigned short*>(p); }
  static __device__ __forceinline__ uint4 u128(const void* p) { return *static_cast<const uint4*>(p); }
  static __device__ __forceinline__ float4 f128(const void* p) { return *static_cast<const float4*>(p); }
};

// 16 bytes from a 2-byte aligned address, as four little-endian words.
template <class L>
__device__ __forceinline__ void load16_a2(const uint8_t* p, uint32_t (&v)[4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) v[k] = L::u16(p + 4 * k) | (L::u16(p + 4 * k + 2) << 16);
}

template <class L>
__device__ __forceinline__ void load16_a16(const uint8_t* p, uint32_t (&v)[4]) {
  const uint4 q = L::u128(p);
  v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
}

__device__ __forceinline__ int byte_of(const uint32_t (&v)[4], int k) { return (v[k >> 2] >> (8 * (k & 3))) & 0xff; }

template <class L>
__device__ __forceinline__ uint32_t load32_a2(const uint8_t* p) {
  return L::u16(p) | (L::u16(p + 2) << 16);
}

template <class L>
__device__ __forceinline__ float ld_half(const uint16_t* p) {
  return fp16_to_float(static_cast<uint16_t>(L::u16(p)));
}

// decode<L>(block, unit, w): the unit's weights as floats, in x-offset order.
template <class L>
__device__ __forceinline__ void decode(const f32_unit& b, int, float (&w)[32]) {
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float4 q = L::f128(b.v + 4 * k);
    w[4 * k] = q.x, w[4 * k + 1] = q.y, w[4 * k + 2] = q.z, w[4 * k + 3] = q.w;
  }
}

template <class L>
__device__ __forceinline__ void decode(const f16_unit& b, int, float (&w)[32]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint4 q = L::u128(b.v + 8 * k);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[j]));
      w[8 * k + 2 * j] = f.x, w[8 * k + 2 * j + 1] = f.y;
    }
  }
}

// Small 4/5-bit blocks: element j < 16 is the low nibble of qs[j], element j + 16 the high one.
template <int Bias>
__device__ __forceinline__ void decode_nibbles(const uint32_t (&qs)[4], uint32_t qh, float d, float m,
                                               float (&w)[32]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int b = byte_of(qs, j);
    const int lo = (b & 15) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (b >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    w[j] = fmaf(static_cast<float>(lo - Bias), d, m);
    w[j + 16] = fmaf(static_cast<float>(hi - Bias), d, m);
  }
}

template <class L>
__device__ __forceinline__ void decode(const block_q4_0& b, int, float (&w)[32]) {
  uint32_t qs[4];
  load16_a2<L>(b.qs, qs);
  decode_nibbles<8>(qs, 0u, ld_half<L>(&b.d), 0.f, w);
}

template <class L>
__device__ __forceinline__ void decode(const block_q4_1& b, int, float (&w)[32]) {
  uint32_t qs[4];
  load16_a2<L>(b.qs, qs);
  decode_nibbles<0>(qs, 0u, ld_half<L>(&b.d), ld_half<L>(&b.m), w);
}

template <class L>
__device__ __forceinline__ void decode(const block_q5_0& b, int, float (&w)[32]) {
  uint32_t qs[4];
  load16_a2<L>(b.qs, qs);
  decode_nibbles<16>(qs, load32_a2<L>(b.qh), ld_half<L>(&b.d), 0.f, w);
}

template <class L>
__device__ __forceinline__ void decode(const block_q5_1& b, int, float (&w)[32]) {
  uint32_t qs[4];
  load16_a2<L>(b.qs, qs);
  decode_nibbles<0>(qs, load32_a2<L>(b.qh), ld_half<L>(&b.d), ld_half<L>(&b.m), w);
}

template <class L>
__device__ __forceinline__ void decode(const block_q8_0& b, int, float (&w)[32]) {
  const auto* q = reinterpret_cast<const uint8_t*>(b.qs);
  uint32_t lo[4], hi[4];
  load16_a2<L>(q, lo);
  load16_a2<L>(q + 16, hi);
  const float d = ld_half<L>(&b.d);
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    w[j] = d * static_cast<float>(static_cast<int8_t>(byte_of(lo, j)));
    w[j + 16] = d * static_cast<float>(static_cast<int8_t>(byte_of(hi, j)));
  }
}

// Q4_K/Q5_K group g: sub-block 2g from the low nibbles of qs[32g..32g+31], 2g+1 from the high.
template <class L, bool Five>
__device__ __forceinline__ void decode_k45(const uint8_t* qs32, const uint8_t* qh32, const uint8_t* scales,
                                           float d, float dmin, int g, float (&w)[64]) {
  int sc0, m0, sc1, m1;
  k_scale_min(2 * g, scales, sc0, m0);
  k_scale_min(2 * g + 1, scales, sc1, m1);
  const float d0 = d * static_cast<float>(sc0), d1 = d * static_cast<float>(sc1);
  const float n0 = -dmin * static_cast<float>(m0), n1 = -dmin * static_cast<float>(m1);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    uint32_t q[4], h[4] = {0, 0, 0, 0};
    load16_a16<L>(qs32 + 16 * half, q);
    if (Five) load16_a16<L>(qh32 + 16 * half, h);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int l = 16 * half + j;
      const int b = byte_of(q, j);
      const int hb = Five ? byte_of(h, j) : 0;
      const int lo = (b & 15) | (((hb >> (2 * g)) & 1) << 4);
      const int hi = (b >> 4) | (((hb >> (2 * g + 1)) & 1) << 4);
      w[l] = fmaf(d0, static_cast<float>(lo), n0);
      w[32 + l] = fmaf(d1, static_cast<float>(hi), n1);
    }
  }
}

template <class L>
__device__ __forceinline__ void decode(const block_q4_k& b, int g, float (&w)[64]) {
  decode_k45<L, false>(b.qs + 32 * g, nullptr, b.scales, ld_half<L>(&b.d), ld_half<L>(&b.dmin), g, w);
}

template <class L>
__device__ __forceinline__ void decode(const block_q5_k& b, int g, float (&w)[64]) {
  decode_k45<L, true>(b.qs + 32 * g, b.qh, b.scales, ld_half<L>(&b.d), ld_half<L>(&b.dmin), g, w);
}

// Q6_K unit s: half h = s / 2, l = 16 (s % 2) + i; w[16 r + i] is quarter r's weight l.
template <class L>
__device__ __forceinline__ void decode(const block_q6_k& b, int s, float (&w)[64]) {
  const int h = s / 2, lh = s % 2;
  uint32_t qa[4], qb[4], qh[4];
  load16_a2<L>(b.ql + 64 * h + 16 * lh, qa);
  load16_a2<L>(b.ql + 64 * h + 16 * lh + 32, qb);
  load16_a2<L>(b.qh + 32 * h + 16 * lh, qh);
  const float d = ld_half<L>(&b.d);
  const int8_t* sc = b.scales + 8 * h + lh;
  const float s0 = d * static_cast<float>(sc[0]), s1 = d * static_cast<float>(sc[2]);
  const float s2 = d * static_cast<float>(sc[4]), s3 = d * static_cast<float>(sc[6]);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int a = byte_of(qa, i), c = byte_of(qb, i), hb = byte_of(qh, i);
    w[i] = s0 * static_cast<float>(((a & 15) | ((hb & 3) << 4)) - 32);
    w[16 + i] = s1 * static_cast<float>(((c & 15) | (((hb >> 2) & 3) << 4)) - 32);
    w[32 + i] = s2 * static_cast<float>(((a >> 4) | (((hb >> 4) & 3) << 4)) - 32);
    w[48 + i] = s3 * static_cast<float>(((c >> 4) | (((hb >> 6) & 3) << 4)) - 32);
  }
}

// Adds the unit's dot with each of up to NT token rows of x (row stride n_in) into acc.
template <class B, int NT>
__device__ __forceinline__ void dot_unit(const float (&wv)[unit_traits<B>::elems], const float* xb, int64_t n_in,
                                         int n_tok, float (&acc)[NT]) {
  using U = unit_traits<B>;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (NT > 1 && t >= n_tok) break;
    const float* xt = xb + t * n_in;
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < U::elems / 4; ++k) {
      const int e = 4 * k;
      const int off = (e / U::run_len) * U::run_stride + e % U::run_len;
      const float4 xv = __ldg(reinterpret_cast<const float4*>(xt + off));
      sum = fmaf(wv[e], xv.x, sum);
      sum = fmaf(wv[e + 1], xv.y, sum);
      sum = fmaf(wv[e + 2], xv.z, sum);
      sum = fmaf(wv[e + 3], xv.w, sum);
    }
    acc[t] += sum;
  }
}

}  // namespace mv
}  // namespace tandem
