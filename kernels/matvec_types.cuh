// Per-type "pieces" of the decode mat-vec: how one lane loads a fixed slice of a GGUF weight block
// and dots it with the matching slice of x (int8 q8_1-style blocks via __dp4a, or floats for
// F32/F16). Consecutive lanes take consecutive pieces, so weight and x loads coalesce.
// Included by the mat-vec kernels (matvec.cu, moe_matvec.cu).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "quant/blocks.h"
#include "quant/ggml_type.h"

namespace tandem {
namespace mv {

// The byte offsets below are the GGUF layouts.
static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20 && sizeof(block_q5_0) == 22 &&
                  sizeof(block_q5_1) == 24 && sizeof(block_q8_0) == 34 && sizeof(block_q4_k) == 144 &&
                  sizeof(block_q5_k) == 176 && sizeof(block_q6_k) == 210,
              "unexpected GGUF block size");

// x as the kernels read it: floats (F32/F16 weights) or int8 blocks of 32 with per-block
// (d, d * sum q) for the quantized types. Token t's row starts at t * n_in (floats and int8)
// and t * (n_in / 32) (scales).
struct x_view {
  const float* xf;
  const int8_t* qx;
  const float2* ds;
  int64_t n_in;
};

__device__ __forceinline__ float half_bits(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}
// Loads by alignment; every weight load goes through the read-only path.
__device__ __forceinline__ uint32_t ld16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
__device__ __forceinline__ uint32_t ld32_a2(const uint8_t* p) { return ld16(p) | (ld16(p + 2) << 16); }
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned int*>(p)); }
__device__ __forceinline__ uint2 ld64(const uint8_t* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
__device__ __forceinline__ uint4 ld128(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

__device__ __forceinline__ int dp4a(uint32_t a, int b, int c) { return __dp4a(static_cast<int>(a), b, c); }

// Bits 0..3 of h moved to bit 4 of bytes 0..3 (the 5th bit of Q5_0/Q5_1 weights).
__device__ __forceinline__ uint32_t spread4(uint32_t h) {
  return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}
constexpr uint32_t k_lo4 = 0x0f0f0f0fu;

// Int8 x of one piece: up to 32 bytes (two 16-byte runs) and up to four block scales.
struct qx32 {
  int4 a, b;
  float2 ds0, ds1;
};

__device__ __forceinline__ int4 ldx16(const int8_t* p) { return __ldg(reinterpret_cast<const int4*>(p)); }

__device__ __forceinline__ int dot16(const uint32_t (&q)[4], const int4& x, int acc) {
  acc = dp4a(q[0], x.x, acc);
  acc = dp4a(q[1], x.y, acc);
  acc = dp4a(q[2], x.z, acc);
  return dp4a(q[3], x.w, acc);
}

// Low and high nibbles of 16 quant bytes (elements 0..15 and 16..31 of a small block or of two
// K-quant sub-blocks), with the 5th bits or-ed in where the type has them.
__device__ __forceinline__ void split_nibbles(const uint32_t (&q)[4], uint32_t (&lo)[4], uint32_t (&hi)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) lo[i] = q[i] & k_lo4, hi[i] = (q[i] >> 4) & k_lo4;
}

// Small blocks: the piece is the whole block (32 weights); x block b.
__device__ __forceinline__ qx32 load_x_small(const x_view& xs, int t, int b) {
  const int8_t* q = xs.qx + t * xs.n_in + 32 * static_cast<int64_t>(b);
  qx32 r;
  r.a = ldx16(q);
  r.b = ldx16(q + 16);
  r.ds0 = __ldg(xs.ds + t * (xs.n_in / 32) + b);
  return r;
}

// Each type: load(block, k) issues the loads of piece k into a raw piece (no arithmetic on the
// loaded words, so a thread can keep it in flight while it works on the previous piece);
// decode(raw, k) turns it into the form dot(decoded, x) uses for every token.
// A 2-byte aligned run of S bytes at p, fetched as the N aligned 16-byte chunks from the one
// holding p: lanes that take consecutive blocks then touch few cache lines per load
// instruction, where 2-byte loads would touch as many per instruction for an eighth of the
// bytes. Near `limit` (the end of the matrix) the run's own bytes are loaded 2 at a time
// instead, so nothing past the matrix is read. s: the run's offset in w.
template <int N>
struct window {
  uint32_t w[4 * N];
  int s;
};

template <int S, int N>
__device__ __forceinline__ window<N> load_window(const uint8_t* p, const uint8_t* limit) {
  static_assert(S + 14 <= 16 * N, "the window must hold the run at any even offset");
  window<N> r;
  const auto* a0 = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(15));
  if (a0 + 16 * N <= limit) {
#pragma unroll
    for (int c = 0; c < N; ++c) {
      const uint4 v = ld128(a0 + 16 * c);
      r.w[4 * c] = v.x, r.w[4 * c + 1] = v.y, r.w[4 * c + 2] = v.z, r.w[4 * c + 3] = v.w;
    }
    r.s = static_cast<int>(p - a0);
  } else {
#pragma unroll
    for (int j = 0; j < 4 * N; ++j)
      r.w[j] = 4 * j + 4 <= S ? ld32_a2(p + 4 * j) : 4 * j + 2 <= S ? ld16(p + 4 * j) : 0u;
    r.s = 0;
  }
  return r;
}

// o[j] = bytes 4j .. 4j + 3 of the run (zero past the window), by a two-stage word rotation and
// a funnel shift: no runtime register indexing.
template <int M, int N>
__device__ __forceinline__ void realign(const window<N>& r, uint32_t (&o)[M]) {
  constexpr int n = 4 * N;
  const int k = r.s >> 2;
  const auto sh = static_cast<uint32_t>(8 * (r.s & 3));
  uint32_t x[M + 2], v[M + 1];
#pragma unroll
  for (int i = 0; i < M + 2; ++i) {
    const uint32_t a = i < n ? r.w[i] : 0u, b = i + 2 < n ? r.w[i + 2] : 0u;
    x[i] = (k & 2) ? b : a;
  }
#pragma unroll
  for (int j = 0; j < M + 1; ++j) v[j] = (k & 1) ? x[j + 1] : x[j];
#pragma unroll
  for (int j = 0; j < M; ++j) o[j] = __funnelshift_r(v[j], v[j + 1], sh);
}

struct small_raw {
  uint32_t q[4];
  uint32_t d;   // fp16 d (and fp16 m in the high half for Q4_1/Q5_1)
  uint32_t qh;  // Q5_0/Q5_1 5th bits
};
struct small_dec {
  uint32_t lo[4], hi[4];
  float d, m;
};

template <int Bias, bool Min, bool Five>
__device__ __forceinline__ small_dec decode_small(const small_raw& r) {
  small_dec w;
  split_nibbles(r.q, w.lo, w.hi);
  if (Five) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w.lo[i] |= spread4(r.qh >> (4 * i));
      w.hi[i] |= spread4(r.qh >> (16 + 4 * i));
    }
  }
  w.d = half_bits(r.d & 0xffffu);
  // sum (q - Bias) x = dx * sum q qx - Bias * (dx * sum qx): folded into m.
  w.m = Min ? half_bits(r.d >> 16) : -static_cast<float>(Bias) * w.d;
  return w;
}

template <class Blk, int Bias, bool Min, bool Five>
struct small_type {
  using block = Blk;
  static constexpr int qk = 32, ppb = 1;
  static constexpr bool int8_x = true;
  using raw = small_raw;
  using dec = small_dec;
  using xpiece = qx32;
  static __device__ __forceinline__ dec decode(const raw& r, int) { return decode_small<Bias, Min, Five>(r); }
  static __device__ __forceinline__ xpiece load_x(const x_view& xs, int t, int b, int) {
    return load_x_small(xs, t, b);
  }
  static __device__ __forceinline__ float dot(const dec& w, const xpiece& x) {
    const int s = dot16(w.hi, x.b, dot16(w.lo, x.a, 0));
    return w.d * x.ds0.x * static_cast<float>(s) + w.m * x.ds0.y;
  }
};

// Q4_0 and Q5_0 blocks are only 2-byte aligned: fetched through a window, decoded from it.
template <class Base, int S, int N>
struct windowed : Base {
  using raw = window<N>;
  static __device__ __forceinline__ raw load(const uint8_t* blk, int, const uint8_t* limit) {
    return load_window<S, N>(blk, limit);
  }
};

struct mq_q4_0 : windowed<small_type<block_q4_0, 8, false, false>, 18, 2> {
  static __device__ __forceinline__ dec decode(const raw& r, int) {
    uint32_t o[5];
    realign(r, o);
    small_raw b;
#pragma unroll
    for (int i = 0; i < 4; ++i) b.q[i] = __funnelshift_r(o[i], o[i + 1], 16);  // bytes 2 + 4i ..
    b.d = o[0] & 0xffffu, b.qh = 0;
    return decode_small<8, false, false>(b);
  }
};
struct mq_q4_1 : small_type<block_q4_1, 0, true, false> {
  static __device__ __forceinline__ raw load(const uint8_t* blk, int, const uint8_t*) {
    raw r;
#pragma unroll
    for (int i = 0; i < 4; ++i) r.q[i] = ld32(blk + 4 + 4 * i);
    r.d = ld32(blk), r.qh = 0;
    return r;
  }
};
struct mq_q5_0 : windowed<small_type<block_q5_0, 16, false, true>, 22, 3> {
  static __device__ __forceinline__ dec decode(const raw& r, int) {
    uint32_t o[6];
    realign(r, o);
    small_raw b;
#pragma unroll
    for (int i = 0; i < 4; ++i) b.q[i] = __funnelshift_r(o[i + 1], o[i + 2], 16);  // bytes 6 + 4i ..
    b.d = o[0] & 0xffffu, b.qh = __funnelshift_r(o[0], o[1], 16);
    return decode_small<16, false, true>(b);
  }
};
struct mq_q5_1 : small_type<block_q5_1, 0, true, true> {
  static __device__ __forceinline__ raw load(const uint8_t* blk, int, const uint8_t*) {
    const uint2 q0 = ld64(blk + 8), q1 = ld64(blk + 16);
    raw r;
    r.q[0] = q0.x, r.q[1] = q0.y, r.q[2] = q1.x, r.q[3] = q1.y;
    r.d = ld32(blk), r.qh = ld32(blk + 4);
    return r;
  }
};

// Q8_0: one piece per block, fetched through a window (blocks are only 2-byte aligned).
struct q8_dec {
  uint32_t q[8];
  float d;
};
struct mq_q8_0 {
  using block = block_q8_0;
  static constexpr int qk = 32, ppb = 1;
  static constexpr bool int8_x = true;
  using raw = window<3>;
  using dec = q8_dec;
  using xpiece = qx32;
  static __device__ __forceinline__ raw load(const uint8_t* blk, int, const uint8_t* limit) {
    return load_window<34, 3>(blk, limit);
  }
  static __device__ __forceinline__ dec decode(const raw& r, int) {
    uint32_t o[9];
    realign(r, o);
    dec w;
#pragma unroll
    for (int i = 0; i < 8; ++i) w.q[i] = __funnelshift_r(o[i], o[i + 1], 16);  // bytes 2 + 4i ..
    w.d = half_bits(o[0] & 0xffffu);
    return w;
  }
  static __device__ __forceinline__ xpiece load_x(const x_view& xs, int t, int b, int) {
    return load_x_small(xs, t, b);
  }
  static __device__ __forceinline__ float dot(const dec& w, const xpiece& x) {
    const uint32_t lo[4] = {w.q[0], w.q[1], w.q[2], w.q[3]}, hi[4] = {w.q[4], w.q[5], w.q[6], w.q[7]};
    return w.d * x.ds0.x * static_cast<float>(dot16(hi, x.b, dot16(lo, x.a, 0)));
  }
};

// Q4_K/Q5_K: eight pieces per block; piece k holds 16 quant bytes of 64-weight group g = k / 2,
// i.e. weights 16 (k % 2) .. +15 of sub-blocks 2g (low nibbles) and 2g + 1 (high nibbles).
struct k45_raw {
  uint4 q, h;  // h: Q5_K's 5th bits of the same 16 weights
  uint32_t dm, s0, s1, s2;
};
struct k45_dec {
  uint32_t lo[4], hi[4];
  float d0, d1, m0, m1;  // d * scale and dmin * min of the two sub-blocks
};

// Scale and min of sub-blocks 2g and 2g + 1 from the 12 packed scale bytes (words s0, s1, s2),
// both sub-blocks at once: for g < 2, 6 bits of bytes 2g, 2g + 1 of s0 (scales) and s1 (mins);
// else 4 bits of bytes 2g - 4, 2g - 3 of s2 (low nibbles: scales, high: mins) and the top two
// bits of the same bytes of s0 (scales) and s1 (mins).
template <class D>
__device__ __forceinline__ void k_scales(uint32_t dm, uint32_t s0, uint32_t s1, uint32_t s2, int g, D& w) {
  const int sft = 16 * (g & 1);
  const uint32_t a0 = s0 >> sft, a1 = s1 >> sft, a2 = s2 >> sft;
  const uint32_t sc = g < 2 ? a0 & 0x3f3fu : (a2 & 0x0f0fu) | ((a0 >> 2) & 0x3030u);
  const uint32_t mn = g < 2 ? a1 & 0x3f3fu : ((a2 >> 4) & 0x0f0fu) | ((a1 >> 2) & 0x3030u);
  const float d = half_bits(dm & 0xffffu), dmin = half_bits(dm >> 16);
  w.d0 = d * static_cast<float>(sc & 0xffu), w.d1 = d * static_cast<float>((sc >> 8) & 0xffu);
  w.m0 = dmin * static_cast<float>(mn & 0xffu), w.m1 = dmin * static_cast<float>((mn >> 8) & 0xffu);
}

template <bool Five>
struct k45_type {
  static constexpr int qk = 256, ppb = 8;
  static constexpr bool int8_x = true;
  using raw = k45_raw;
  using dec = k45_dec;
  using xpiece = qx32;
  static __device__ __forceinline__ raw load(const uint8_t* blk, int k, const uint8_t*) {
    const int g = k >> 1, j = k & 1;
    raw r;
    r.q = ld128(blk + (Five ? 48 : 16) + 32 * g + 16 * j);
    r.h = Five ? ld128(blk + 16 + 16 * j) : make_uint4(0, 0, 0, 0);
    // d, dmin and the 12 scale bytes are the block's first 16 bytes (blocks of 144 and 176 bytes
    // keep 16-byte alignment): one load instead of four.
    const uint4 hd = ld128(blk);
    r.dm = hd.x, r.s0 = hd.y, r.s1 = hd.z, r.s2 = hd.w;
    return r;
  }
  static __device__ __forceinline__ dec decode(const raw& r, int k) {
    const int g = k >> 1;
    const uint32_t q[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
    dec w;
    split_nibbles(q, w.lo, w.hi);
    if (Five) {
      const uint32_t h[4] = {r.h.x, r.h.y, r.h.z, r.h.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        w.lo[i] |= ((h[i] >> (2 * g)) & 0x01010101u) << 4;
        w.hi[i] |= ((h[i] >> (2 * g + 1)) & 0x01010101u) << 4;
      }
    }
    k_scales(r.dm, r.s0, r.s1, r.s2, g, w);
    return w;
  }
  // x: 16 bytes of each of the two sub-blocks and their scales.
  static __device__ __forceinline__ xpiece load_x(const x_view& xs, int t, int b, int k) {
    const int g = k >> 1, j = k & 1;
    const int8_t* q = xs.qx + t * xs.n_in + 256 * static_cast<int64_t>(b) + 64 * g + 16 * j;
    const float2* sp = xs.ds + t * (xs.n_in / 32) + 8 * static_cast<int64_t>(b) + 2 * g;
    const float4 s = __ldg(reinterpret_cast<const float4*>(sp));
    return {ldx16(q), ldx16(q + 32), make_float2(s.x, s.y), make_float2(s.z, s.w)};
  }
  // Each sub-block's min term is split evenly over its two pieces (half of d_x * sum q_x each).
  static __device__ __forceinline__ float dot(const dec& w, const xpiece& x) {
    const int s0 = dot16(w.lo, x.a, 0), s1 = dot16(w.hi, x.b, 0);
    return w.d0 * x.ds0.x * static_cast<float>(s0) + w.d1 * x.ds1.x * static_cast<float>(s1) -
           0.5f * (w.m0 * x.ds0.y + w.m1 * x.ds1.y);
  }
};
// Q4_K as 16-byte pieces: the float-x head's form (matvec_fx.cuh).
struct mq_q4_k16 : k45_type<false> {
  using block = block_q4_k;
};

// Unsigned bytes of a (0..255) times signed bytes of b.
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// Q4_K for int8 x: four pieces per block; piece k is 64-weight group k, its 32 quant bytes
// (low nibbles: sub-block 2k, high: 2k + 1) and the block's d, dmin and packed scales. Whole
// groups halve the scale decoding and header loads per weight byte against 16-byte pieces, and
// the high nibbles are dotted in place (16x, folded into the scale) instead of shifted down:
// decode arithmetic, not bandwidth, bounded the 16-byte form.
struct q4k_raw {
  uint4 a, b;
  uint32_t dm, s0, s1, s2;
};
struct q4k_dec {
  uint32_t q[8];  // the 32 quant bytes; low nibbles by mask, high nibbles in place
  float d0, d1, m0, m1;
};
struct q4k_x {
  int4 a[4];  // x of sub-blocks 2k (a[0], a[1]) and 2k + 1 (a[2], a[3])
  float4 ds;  // (d, d sum q) of the two
};
struct mq_q4_k {
  using block = block_q4_k;
  static constexpr int qk = 256, ppb = 4;
  static constexpr bool int8_x = true;
  using raw = q4k_raw;
  using dec = q4k_dec;
  using xpiece = q4k_x;
  static __device__ __forceinline__ raw load(const uint8_t* blk, int k, const uint8_t*) {
    raw r;
    r.a = ld128(blk + 16 + 32 * k);
    r.b = ld128(blk + 32 + 32 * k);
    const uint4 hd = ld128(blk);
    r.dm = hd.x, r.s0 = hd.y, r.s1 = hd.z, r.s2 = hd.w;
    return r;
  }
  static __device__ __forceinline__ dec decode(const raw& r, int k) {
    dec w = {{r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w}};
    k_scales(r.dm, r.s0, r.s1, r.s2, k, w);
    w.d1 *= 1.f / 16.f;
    return w;
  }
  static __device__ __forceinline__ xpiece load_x(const x_view& xs, int t, int b, int k) {
    const int8_t* q = xs.qx + t * xs.n_in + 256 * static_cast<int64_t>(b) + 64 * k;
    xpiece r;
#pragma unroll
    for (int i = 0; i < 4; ++i) r.a[i] = ldx16(q + 16 * i);
    r.ds = __ldg(reinterpret_cast<const float4*>(xs.ds + t * (xs.n_in / 32) + 8 * static_cast<int64_t>(b) + 2 * k));
    return r;
  }
  static __device__ __forceinline__ float dot(const dec& w, const xpiece& x) {
    const int4 x0[2] = {x.a[0], x.a[1]}, x1[2] = {x.a[2], x.a[3]};
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int xa[4] = {x0[h].x, x0[h].y, x0[h].z, x0[h].w}, xb[4] = {x1[h].x, x1[h].y, x1[h].z, x1[h].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s0 = dp4a(w.q[4 * h + i] & k_lo4, xa[i], s0);
        s1 = dp4a_us(w.q[4 * h + i] & ~k_lo4, xb[i], s1);
      }
    }
    return w.d0 * x.ds.x * static_cast<float>(s0) + w.d1 * x.ds.z * static_cast<float>(s1) -
           (w.m0 * x.ds.y + w.m1 * x.ds.w);
  }
};
struct mq_q5_k : k45_type<true> {
  using block = block_q5_k;
};

// Q6_K: eight pieces per block; piece k covers l = 8 (k % 4) .. +7 of 128-weight half h = k / 4
// in all four 32-weight quarters r (weight 128h + 32r + l): low 4 bits from ql[64h + l] (r = 0, 2)
// or ql[64h + 32 + l] (r = 1, 3), nibble r / 2; high 2 bits from bits 2r of qh[32h + l]; scale
// scales[8h + 2r + l / 16]. Blocks are only 2-byte aligned (every other one is 4-byte aligned):
// each 8-byte field is fetched as the three 4-byte words from its address rounded down to 4
// and shifted into place in decode (12 + 1 loads per piece where 2-byte loads took 17).
struct q6_raw {
  uint32_t a[3], b[3], hb[3];
  uint32_t sc[3];  // scales[8h .. 8h + 7]
  uint32_t d, sh;  // sh: 8 * (block address % 4), 0 or 16
};
struct q6_dec {
  uint32_t q[4][2];  // per quarter, 8 weights as int8 (q - 32)
  float d[4];        // d * scale per quarter
};
struct q6_x {
  int2 a[4];
  float dx[4];
};
struct mq_q6_k {
  using block = block_q6_k;
  static constexpr int qk = 256, ppb = 8;
  static constexpr bool int8_x = true;
  using raw = q6_raw;
  using dec = q6_dec;
  using xpiece = q6_x;
  static __device__ __forceinline__ raw load(const uint8_t* blk, int k, const uint8_t*) {
    const int h = k >> 2, c = k & 3;
    const auto mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(blk) & 3u);
    const uint8_t* base = blk - mis;
    raw r;
    // An aligned block needs no third words (for the scales of h = 1 it would pass the block's end).
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      if (i < 2 || mis) {
        r.a[i] = ld32(base + 64 * h + 8 * c + 4 * i);
        r.b[i] = ld32(base + 64 * h + 32 + 8 * c + 4 * i);
        r.hb[i] = ld32(base + 128 + 32 * h + 8 * c + 4 * i);
        r.sc[i] = ld32(base + 192 + 8 * h + 4 * i);
      } else {
        r.a[i] = r.b[i] = r.hb[i] = r.sc[i] = 0u;
      }
    }
    r.d = ld16(blk + 208);
    r.sh = 8 * mis;
    return r;
  }
  static __device__ __forceinline__ dec decode(const raw& r, int k) {
    const int c = k & 3;
    dec w;
    uint32_t sc[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) sc[i] = __funnelshift_r(r.sc[i], r.sc[i + 1], r.sh);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t a = __funnelshift_r(r.a[i], r.a[i + 1], r.sh), b = __funnelshift_r(r.b[i], r.b[i + 1], r.sh),
                     hb = __funnelshift_r(r.hb[i], r.hb[i + 1], r.sh);
      const uint32_t v[4] = {(a & k_lo4) | ((hb << 4) & 0x30303030u), (b & k_lo4) | ((hb << 2) & 0x30303030u),
                             ((a >> 4) & k_lo4) | (hb & 0x30303030u), ((b >> 4) & k_lo4) | ((hb >> 2) & 0x30303030u)};
      // Bytes 0..63 to int8 (q - 32) without borrows between bytes.
#pragma unroll
      for (int q = 0; q < 4; ++q) w.q[q][i] = (v[q] + 0x60606060u) ^ 0x80808080u;
    }
    const float d = half_bits(r.d);
    const int shift = 8 * (c >> 1);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      // Scale 2q + c / 2 of the eight: byte c / 2 of half-word q.
      const auto s8 = static_cast<int8_t>((sc[q >> 1] >> (16 * (q & 1) + shift)) & 0xffu);
      w.d[q] = d * static_cast<float>(s8);
    }
    return w;
  }
  static __device__ __forceinline__ xpiece load_x(const x_view& xs, int t, int b, int k) {
    const int h = k >> 2, c = k & 3;
    const int8_t* q = xs.qx + t * xs.n_in + 256 * static_cast<int64_t>(b) + 128 * h + 8 * c;
    const auto* s =
        reinterpret_cast<const float4*>(xs.ds + t * (xs.n_in / 32) + 8 * static_cast<int64_t>(b) + 4 * h);
    const float4 s01 = __ldg(s), s23 = __ldg(s + 1);
    xpiece r;
#pragma unroll
    for (int i = 0; i < 4; ++i) r.a[i] = __ldg(reinterpret_cast<const int2*>(q + 32 * i));
    r.dx[0] = s01.x, r.dx[1] = s01.z, r.dx[2] = s23.x, r.dx[3] = s23.z;
    return r;
  }
  static __device__ __forceinline__ float dot(const dec& w, const xpiece& x) {
    float sum = 0.f;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int s = dp4a(w.q[r][1], x.a[r].y, dp4a(w.q[r][0], x.a[r].x, 0));
      sum = fmaf(w.d[r] * x.dx[r], static_cast<float>(s), sum);
    }
    return sum;
  }
};

// Unquantized rows, seen as 32-element "blocks"; float x. A piece is 16 bytes of weights.
struct f32_block {
  float v[32];
};
struct f16_block {
  uint16_t v[32];
};
struct mq_f32 {
  using block = f32_block;
  static constexpr int qk = 32, ppb = 8;
  static constexpr bool int8_x = false;
  using raw = float4;
  using dec = float4;
  using xpiece = float4;
  static __device__ __forceinline__ raw load(const uint8_t* blk, int k, const uint8_t*) {
    return __ldg(reinterpret_cast<const float4*>(blk) + k);
  }
  static __device__ __forceinline__ dec decode(const raw& r, int) { return r; }
  static __device__ __forceinline__ xpiece load_x(const x_view& xs, int t, int b, int k) {
    return __ldg(reinterpret_cast<const float4*>(xs.xf + t * xs.n_in + 32 * static_cast<int64_t>(b)) + k);
  }
  static __device__ __forceinline__ float dot(const dec& w, const xpiece& x) {
    return fmaf(w.w, x.w, fmaf(w.z, x.z, fmaf(w.y, x.y, w.x * x.x)));
  }
};

struct f16_dec {
  float v[8];
};
struct f16_x {
  float4 a, b;
};
struct mq_f16 {
  using block = f16_block;
  static constexpr int qk = 32, ppb = 4;
  static constexpr bool int8_x = false;
  using raw = uint4;
  using dec = f16_dec;
  using xpiece = f16_x;
  static __device__ __forceinline__ raw load(const uint8_t* blk, int k, const uint8_t*) {
    return ld128(blk + 16 * k);
  }
  static __device__ __forceinline__ dec decode(const raw& r, int) {
    const uint32_t words[4] = {r.x, r.y, r.z, r.w};
    dec w;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
      w.v[2 * i] = f.x, w.v[2 * i + 1] = f.y;
    }
    return w;
  }
  static __device__ __forceinline__ xpiece load_x(const x_view& xs, int t, int b, int k) {
    const auto* p = reinterpret_cast<const float4*>(xs.xf + t * xs.n_in + 32 * static_cast<int64_t>(b) + 8 * k);
    return {__ldg(p), __ldg(p + 1)};
  }
  static __device__ __forceinline__ float dot(const dec& w, const xpiece& x) {
    const float xv[8] = {x.a.x, x.a.y, x.a.z, x.a.w, x.b.x, x.b.y, x.b.z, x.b.w};
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) sum = fmaf(w.v[i], xv[i], sum);
    return sum;
  }
};

// f(mq_<type>{}) for the quantized (int8-x) types; cudaErrorInvalidValue for the others.
template <class F>
cudaError_t with_int8_type(ggml_type t, F&& f) {
  switch (t) {
    case ggml_type::q4_0: return f(mq_q4_0{});
    case ggml_type::q4_1: return f(mq_q4_1{});
    case ggml_type::q5_0: return f(mq_q5_0{});
    case ggml_type::q5_1: return f(mq_q5_1{});
    case ggml_type::q8_0: return f(mq_q8_0{});
    case ggml_type::q4_k: return f(mq_q4_k{});
    case ggml_type::q5_k: return f(mq_q5_k{});
    case ggml_type::q6_k: return f(mq_q6_k{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mv
}  // namespace tandem
