// Device-side decoding of the ggml quant blocks (layouts in engine/quant/blocks.h), four
// consecutive weights at a time. Included only by .cu files; mat-vec kernels reuse the helpers.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "quant/blocks.h"
#include "quant/ggml_type.h"

namespace tandem {

__device__ __forceinline__ float fp16_to_float(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}

// bf16 is the top half of a float32; shifting keeps this free of sm_80 bf16 intrinsics.
__device__ __forceinline__ float bf16_to_float(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ uint16_t float_to_fp16(float x) {
  return __half_as_ushort(__float2half_rn(x));
}

// Products use __fmul_rn so the compiler cannot fuse them into an FMA: the results then
// round exactly like the CPU reference's separate multiply and add.
__device__ __forceinline__ float mul_add_exact(float a, float b, float c) {
  return __fadd_rn(__fmul_rn(a, b), c);
}

// K-quant 6-bit scale and min of sub-block j (0..7) from the packed 12-byte array.
__device__ __forceinline__ void k_scale_min(int j, const uint8_t* s, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Elements per block, per block type; the kernels index blocks with it.
template <class Block>
struct block_traits;
template <>
struct block_traits<block_q4_0> { static constexpr int qk = qk_small; };
template <>
struct block_traits<block_q4_1> { static constexpr int qk = qk_small; };
template <>
struct block_traits<block_q5_0> { static constexpr int qk = qk_small; };
template <>
struct block_traits<block_q5_1> { static constexpr int qk = qk_small; };
template <>
struct block_traits<block_q8_0> { static constexpr int qk = qk_small; };
template <>
struct block_traits<block_q4_k> { static constexpr int qk = qk_k; };
template <>
struct block_traits<block_q5_k> { static constexpr int qk = qk_k; };
template <>
struct block_traits<block_q6_k> { static constexpr int qk = qk_k; };

// Small blocks: element j < 16 is the low nibble of qs[j], element j + 16 the high nibble.
// Chunk c covers elements 4c..4c+3, so it reads qs[(4c) & 15 ...] and one nibble half.
__device__ __forceinline__ int nibble(const uint8_t* qs, int e) {
  const int b = qs[e & 15];
  return e < 16 ? (b & 15) : (b >> 4);
}

// The 5th bit of element e (bit e of the little-endian 32-bit qh).
__device__ __forceinline__ uint32_t load_qh32(const uint8_t* qh) {
  return static_cast<uint32_t>(qh[0]) | (static_cast<uint32_t>(qh[1]) << 8) |
         (static_cast<uint32_t>(qh[2]) << 16) | (static_cast<uint32_t>(qh[3]) << 24);
}

// y[i] = weight 4c + i of block b.
__device__ __forceinline__ void dequant4(const block_q4_0& b, int c, float (&y)[4]) {
  const float d = fp16_to_float(b.d);
#pragma unroll
  for (int i = 0; i < 4; ++i) y[i] = __fmul_rn(static_cast<float>(nibble(b.qs, 4 * c + i) - 8), d);
}

__device__ __forceinline__ void dequant4(const block_q4_1& b, int c, float (&y)[4]) {
  const float d = fp16_to_float(b.d);
  const float m = fp16_to_float(b.m);
#pragma unroll
  for (int i = 0; i < 4; ++i) y[i] = mul_add_exact(static_cast<float>(nibble(b.qs, 4 * c + i)), d, m);
}

__device__ __forceinline__ void dequant4(const block_q5_0& b, int c, float (&y)[4]) {
  const float d = fp16_to_float(b.d);
  const uint32_t qh = load_qh32(b.qh);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int e = 4 * c + i;
    const int q = nibble(b.qs, e) | static_cast<int>(((qh >> e) & 1u) << 4);
    y[i] = __fmul_rn(static_cast<float>(q - 16), d);
  }
}

__device__ __forceinline__ void dequant4(const block_q5_1& b, int c, float (&y)[4]) {
  const float d = fp16_to_float(b.d);
  const float m = fp16_to_float(b.m);
  const uint32_t qh = load_qh32(b.qh);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int e = 4 * c + i;
    const int q = nibble(b.qs, e) | static_cast<int>(((qh >> e) & 1u) << 4);
    y[i] = mul_add_exact(static_cast<float>(q), d, m);
  }
}

__device__ __forceinline__ void dequant4(const block_q8_0& b, int c, float (&y)[4]) {
  const float d = fp16_to_float(b.d);
#pragma unroll
  for (int i = 0; i < 4; ++i) y[i] = __fmul_rn(static_cast<float>(b.qs[4 * c + i]), d);
}

// Q4_K/Q5_K: 64-weight group g = e / 64 holds sub-blocks 2g (low nibbles of qs[32g..32g+31])
// and 2g+1 (high nibbles); Q5_K's 5th bit for sub-block s is bit s of qh[e % 32].
__device__ __forceinline__ void dequant4(const block_q4_k& b, int c, float (&y)[4]) {
  const int e = 4 * c;
  const int sub = e / 32;
  const int l = e % 32;
  int sc, m;
  k_scale_min(sub, b.scales, sc, m);
  const float d1 = __fmul_rn(fp16_to_float(b.d), static_cast<float>(sc));
  const float m1 = __fmul_rn(fp16_to_float(b.dmin), static_cast<float>(m));
  const uint8_t* q = b.qs + 32 * (sub / 2) + l;
  const int shift = 4 * (sub & 1);
#pragma unroll
  for (int i = 0; i < 4; ++i) y[i] = mul_add_exact(d1, static_cast<float>((q[i] >> shift) & 15), -m1);
}

__device__ __forceinline__ void dequant4(const block_q5_k& b, int c, float (&y)[4]) {
  const int e = 4 * c;
  const int sub = e / 32;
  const int l = e % 32;
  int sc, m;
  k_scale_min(sub, b.scales, sc, m);
  const float d1 = __fmul_rn(fp16_to_float(b.d), static_cast<float>(sc));
  const float m1 = __fmul_rn(fp16_to_float(b.dmin), static_cast<float>(m));
  const uint8_t* q = b.qs + 32 * (sub / 2) + l;
  const int shift = 4 * (sub & 1);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int hi = ((b.qh[l + i] >> sub) & 1) << 4;
    y[i] = mul_add_exact(d1, static_cast<float>(((q[i] >> shift) & 15) | hi), -m1);
  }
}

// Q6_K: each 128-weight half h has quarters r = 0..3 of 32 weights; weight l of quarter r takes
// its low 4 bits from ql[64h + l + 32(r&1)] (nibble r>>1), its high 2 bits from bits 2r..2r+1
// of qh[32h + l], and scale scales[8h + l/16 + 2r].
__device__ __forceinline__ void dequant4(const block_q6_k& b, int c, float (&y)[4]) {
  const int e = 4 * c;
  const int h = e / 128;
  const int r = (e % 128) / 32;
  const int l = e % 32;
  const uint8_t* ql = b.ql + 64 * h + 32 * (r & 1) + l;
  const uint8_t* qh = b.qh + 32 * h + l;
  const int lo_shift = 4 * (r >> 1);
  const int hi_shift = 2 * r;
  const float ds = __fmul_rn(fp16_to_float(b.d), static_cast<float>(b.scales[8 * h + l / 16 + 2 * r]));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q = (((ql[i] >> lo_shift) & 15) | (((qh[i] >> hi_shift) & 3) << 4)) - 32;
    y[i] = __fmul_rn(ds, static_cast<float>(q));
  }
}

// The types row_src reads (the GEMMs' capability tables: gpu_can_moe_gemm, gpu_can_qgemm).
inline bool row_src_reads(ggml_type t) {
  switch (t) {
    case ggml_type::f32:
    case ggml_type::f16:
    case ggml_type::q4_0:
    case ggml_type::q4_1:
    case ggml_type::q5_0:
    case ggml_type::q5_1:
    case ggml_type::q8_0:
    case ggml_type::q4_k:
    case ggml_type::q5_k:
    case ggml_type::q6_k: return true;
    default: return false;
  }
}

// Four consecutive weights (columns col .. col + 3, col % 4 == 0) of a GGUF weight row, as floats:
// the GEMMs' tile loaders. Block types dequantize; f32_w and f16_w tag plain rows.
template <class Block>
struct row_src {
  static __device__ __forceinline__ void load4(const uint8_t* row, int64_t col, float (&v)[4]) {
    constexpr int qk = block_traits<Block>::qk;
    const Block& b = reinterpret_cast<const Block*>(row)[col / qk];
    dequant4(b, static_cast<int>(col % qk) / 4, v);
  }
};
struct f32_w {};
struct f16_w {};
template <>
struct row_src<f32_w> {
  static __device__ __forceinline__ void load4(const uint8_t* row, int64_t col, float (&v)[4]) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(row) + col / 4);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  }
};
template <>
struct row_src<f16_w> {
  static __device__ __forceinline__ void load4(const uint8_t* row, int64_t col, float (&v)[4]) {
    const uint2 h = __ldg(reinterpret_cast<const uint2*>(row) + col / 4);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&h.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&h.y));
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
  }
};

}  // namespace tandem
