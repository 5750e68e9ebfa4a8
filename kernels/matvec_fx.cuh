// Float-activation variants of the quantized mat-vec pieces (matvec_types.cuh): the same weight
// loads and decoding, dotted with x as floats instead of its int8 copy. For the output head,
// whose argmax a 1-4% int8 rounding of x with outliers can flip. Included only by matvec.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matvec_types.cuh"

namespace tandem {
namespace mv {

// 32 floats of x: the piece's weights in the order the type's dot walks them.
struct fx32 {
  float4 v[8];
};

__device__ __forceinline__ float4 ldxf(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// Byte i of w as a float, exactly, through the float 2^23 + byte: one byte permute and one add
// (an int-to-float conversion runs at a quarter of the float rate). `bias` is subtracted too
// (exact: every value stays an integer below 2^24).
template <int I>
__device__ __forceinline__ float byte_f(uint32_t w, float bias) {
  return __uint_as_float(__byte_perm(w, 0x4b000000u, 0x7440u | I)) - (8388608.f + bias);
}

// The 4 bytes of w (unsigned, minus bias) as floats into o[0..3].
__device__ __forceinline__ void bytes_f(uint32_t w, float bias, float* o) {
  o[0] = byte_f<0>(w, bias), o[1] = byte_f<1>(w, bias), o[2] = byte_f<2>(w, bias), o[3] = byte_f<3>(w, bias);
}
// Signed bytes: flipping the sign bit makes them unsigned with a bias of 128.
__device__ __forceinline__ void bytes_f_s8(uint32_t w, float* o) { bytes_f(w ^ 0x80808080u, 128.f, o); }
__device__ __forceinline__ float sum4(const float4& x) { return (x.x + x.y) + (x.z + x.w); }
__device__ __forceinline__ float dot4(const float* w, const float4& x, float acc) {
  return fmaf(w[3], x.w, fmaf(w[2], x.z, fmaf(w[1], x.y, fmaf(w[0], x.x, acc))));
}

// A decoded K-quant piece: its 32 weights' integer levels as floats (converted once, then dotted
// with every token's x) and up to four scales, whose meaning depends on the type. Weight 4i + j
// pairs with component j of x.v[i].
struct fdec {
  float w[32];
  float a, b, c, e;
};

template <class Q>
struct fx;

// Small blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) take four pieces of 8 weights per block here
// (the int8 kernels take the whole block): a lane's x is then 32 bytes next to its neighbours'
// instead of 128 bytes, 128 bytes apart, so a warp's x load touches 8 cache lines, not 32. The
// four lanes of a block load the same weight bytes (one L1 request). Weight = d q + m (m = -bias
// d without a min); quarter k of the block: elements 8k .. 8k + 7.
struct fdec8 {
  float w[8];
  float d, m;
};
struct fx8 {
  float4 a, b;
};
// Words 2k and 2k + 1 of the block's 8 quant words, by selects (no runtime register indexing).
__device__ __forceinline__ void quarter_words(const uint32_t (&q)[8], int k, uint32_t& w0, uint32_t& w1) {
  w0 = k == 0 ? q[0] : k == 1 ? q[2] : k == 2 ? q[4] : q[6];
  w1 = k == 0 ? q[1] : k == 1 ? q[3] : k == 2 ? q[5] : q[7];
}

template <class Q, bool Signed>
struct fx_quarters : Q {
  static constexpr bool int8_x = false;
  static constexpr int ppb = 4;
  using dec = fdec8;
  using xpiece = fx8;
  static __device__ __forceinline__ dec decode(const typename Q::raw& r, int k) {
    const typename Q::dec b = Q::decode(r, 0);
    uint32_t q[8], w0, w1;
    float d, m;
    if constexpr (Signed) {
#pragma unroll
      for (int i = 0; i < 8; ++i) q[i] = b.q[i];
      d = b.d, m = 0.f;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) q[i] = b.lo[i], q[4 + i] = b.hi[i];  // elements 0..15, 16..31
      d = b.d, m = b.m;
    }
    quarter_words(q, k, w0, w1);
    dec w;
    if constexpr (Signed) {
      bytes_f_s8(w0, w.w), bytes_f_s8(w1, w.w + 4);
    } else {
      bytes_f(w0, 0.f, w.w), bytes_f(w1, 0.f, w.w + 4);
    }
    w.d = d, w.m = m;
    return w;
  }
  static __device__ __forceinline__ xpiece load_x(const x_view& xs, int t, int b, int k) {
    const float* p = xs.xf + t * xs.n_in + 32 * static_cast<int64_t>(b) + 8 * k;
    return {ldxf(p), ldxf(p + 4)};
  }
  static __device__ __forceinline__ float dot(const dec& w, const xpiece& x) {
    const float s = dot4(w.w + 4, x.b, dot4(w.w, x.a, 0.f));
    return Signed ? w.d * s : fmaf(w.d, s, w.m * (sum4(x.a) + sum4(x.b)));
  }
};
template <>
struct fx<mq_q4_0> : fx_quarters<mq_q4_0, false> {};
template <>
struct fx<mq_q4_1> : fx_quarters<mq_q4_1, false> {};
template <>
struct fx<mq_q5_0> : fx_quarters<mq_q5_0, false> {};
template <>
struct fx<mq_q5_1> : fx_quarters<mq_q5_1, false> {};
template <>
struct fx<mq_q8_0> : fx_quarters<mq_q8_0, true> {};

// Q4_K/Q5_K: 16 weights of sub-block 2g (w[0..15]) and 16 of 2g + 1 (w[16..31]), each d q - m:
// a, b = d0, d1; c, e = m0, m1.
template <class Q>
struct fx_k45 : Q {
  static constexpr bool int8_x = false;
  using dec = fdec;
  using xpiece = fx32;
  static __device__ __forceinline__ dec decode(const k45_raw& r, int k) {
    const k45_dec q = Q::decode(r, k);
    dec w;
#pragma unroll
    for (int i = 0; i < 4; ++i) bytes_f(q.lo[i], 0.f, w.w + 4 * i), bytes_f(q.hi[i], 0.f, w.w + 16 + 4 * i);
    w.a = q.d0, w.b = q.d1, w.c = q.m0, w.e = q.m1;
    return w;
  }
  static __device__ __forceinline__ xpiece load_x(const x_view& xs, int t, int b, int k) {
    const int g = k >> 1, j = k & 1;
    const float* p = xs.xf + t * xs.n_in + 256 * static_cast<int64_t>(b) + 64 * g + 16 * j;
    fx32 r;
#pragma unroll
    for (int i = 0; i < 4; ++i) r.v[i] = ldxf(p + 4 * i), r.v[4 + i] = ldxf(p + 32 + 4 * i);
    return r;
  }
  static __device__ __forceinline__ float dot(const dec& w, const xpiece& x) {
    float s0 = 0.f, s1 = 0.f, x0 = 0.f, x1 = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s0 = dot4(w.w + 4 * i, x.v[i], s0);
      s1 = dot4(w.w + 16 + 4 * i, x.v[4 + i], s1);
      x0 += sum4(x.v[i]);
      x1 += sum4(x.v[4 + i]);
    }
    return w.a * s0 + w.b * s1 - (w.c * x0 + w.e * x1);
  }
};
template <>
struct fx<mq_q4_k> : fx_k45<mq_q4_k16> {};
template <>
struct fx<mq_q5_k> : fx_k45<mq_q5_k> {};

// Q6_K: 8 weights of each quarter q at 128 h + 32 q + 8 c (see mq_q6_k), w[8q ..]; a, b, c, e =
// d * scale of quarters 0..3.
template <>
struct fx<mq_q6_k> : mq_q6_k {
  static constexpr bool int8_x = false;
  using dec = fdec;
  using xpiece = fx32;
  static __device__ __forceinline__ dec decode(const raw& r, int k) {
    const mq_q6_k::dec q = mq_q6_k::decode(r, k);
    dec w;
#pragma unroll
    for (int j = 0; j < 4; ++j) bytes_f_s8(q.q[j][0], w.w + 8 * j), bytes_f_s8(q.q[j][1], w.w + 8 * j + 4);
    w.a = q.d[0], w.b = q.d[1], w.c = q.d[2], w.e = q.d[3];
    return w;
  }
  static __device__ __forceinline__ xpiece load_x(const x_view& xs, int t, int b, int k) {
    const int h = k >> 2, c = k & 3;
    const float* p = xs.xf + t * xs.n_in + 256 * static_cast<int64_t>(b) + 128 * h + 8 * c;
    fx32 r;
#pragma unroll
    for (int q = 0; q < 4; ++q) r.v[2 * q] = ldxf(p + 32 * q), r.v[2 * q + 1] = ldxf(p + 32 * q + 4);
    return r;
  }
  static __device__ __forceinline__ float dot(const dec& w, const xpiece& x) {
    float s[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) s[q] = dot4(w.w + 8 * q + 4, x.v[2 * q + 1], dot4(w.w + 8 * q, x.v[2 * q], 0.f));
    return fmaf(w.e, s[3], fmaf(w.c, s[2], fmaf(w.b, s[1], w.a * s[0])));
  }
};

}  // namespace mv
}  // namespace tandem
