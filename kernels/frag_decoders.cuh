// Decoders of the fragment GEMMs (kernels/qgemm_frag.cu): a Q4_K or Q6_K block's raw bytes in
// shared memory straight into fp16 A fragments of the tensor-core products.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/quant_blocks.cuh"

namespace tandem::frag {

// Bytes I and I + 1 of v (each < 64) as the fp16 pair 1024 + b: 0x64bb is 1024 + bb.
template <int I>
__device__ __forceinline__ __half2 magic_pair(uint32_t v) {
  const uint32_t h = __byte_perm(v, 0x64646464u, 0x4040u | I | (I + 1) << 8);
  return *reinterpret_cast<const __half2*>(&h);
}

__device__ __forceinline__ uint32_t bits(__half2 h) { return *reinterpret_cast<const uint32_t*>(&h); }

// 8 bytes of shared memory at a 2-byte-aligned address (Q6_K blocks are 210 bytes).
__device__ __forceinline__ uint2 lds8(const uint8_t* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
  const int sh = 8 * static_cast<int>(a & 3u);
  const uint32_t w0 = w[0], w1 = w[1], w2 = w[2];
  return make_uint2(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh));
}

// Decoders. Within a 256-column block lane t % 4 of a warp owns 64 columns; sub-step i of group
// gi is the 8 columns col(t, gi, i) .. + 7, decoded for one row into 4 half2 words (columns
// 0-1, 2-3, 4-5, 6-7), which are the A fragments of two m16n8k16 steps. The arithmetic is fp16
// pairs (about 2 instructions a weight, where fp32 and a conversion took 4.5): the quant value
// exactly (a magic-number pair less its bias), times its sub-block's scale rounded to fp16, less
// the rounded min, rounded once. tests/kernels/qgemm_test.cpp computes the same weights.
//
// Q4_K: lane t owns 64-weight group t (32 quant bytes): low nibbles are sub-block 2t, high ones
// 2t + 1; group gi (0..3) reads bytes 8 gi .. + 7 once for both.
struct q4k_frag {
  using type = block_q4_k;
  static constexpr int G = 2, groups = 4;
  // 8-token tiles from which 16-warp blocks serve: never. Two 8-warp blocks fit an SM at any
  // count, and 256-row blocks (16 warps, or 8 of 32 rows) were no faster at 32 and 64 tokens
  // on an H200 (4096 x 12288 the same, 4096 x 4096 and 12288 x 4096 slower): halving x's L2
  // reads did not pay for fewer, larger blocks.
  static constexpr int tall_from = 9;
  struct scales {
    __half2 d[2], m[2];  // (scale, scale) and (-min, -min) of sub-blocks 2t, 2t + 1
  };
  static __device__ __forceinline__ int col(int t, int gi, int i) { return 64 * t + 8 * (gi + 4 * i); }
  static __device__ __forceinline__ scales prepare(const uint8_t* blk, int t) {
    const uint32_t dm = *reinterpret_cast<const uint32_t*>(blk);
    const float d = __half2float(__ushort_as_half(static_cast<uint16_t>(dm & 0xffffu)));
    const float dmin = __half2float(__ushort_as_half(static_cast<uint16_t>(dm >> 16)));
    scales s;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int sc, m;
      k_scale_min(2 * t + h, blk + 4, sc, m);
      s.d[h] = __float2half2_rn(__fmul_rn(d, float(sc)));
      s.m[h] = __float2half2_rn(-__fmul_rn(dmin, float(m)));
    }
    return s;
  }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int t, int gi, const scales& s,
                                                uint32_t (&w)[G][4]) {
    const uint2 q = *reinterpret_cast<const uint2*>(blk + 16 + 32 * t + 8 * gi);
    const uint32_t qw[2] = {q.x, q.y};
    const __half2 bias = __float2half2_rn(1024.f);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint32_t v[2] = {qw[k] & 0x0f0f0f0fu, (qw[k] >> 4) & 0x0f0f0f0fu};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        w[h][2 * k] = bits(__hfma2(__hsub2(magic_pair<0>(v[h]), bias), s.d[h], s.m[h]));
        w[h][2 * k + 1] = bits(__hfma2(__hsub2(magic_pair<2>(v[h]), bias), s.d[h], s.m[h]));
      }
    }
  }
};

// Q6_K: lane t owns l = 8t .. 8t + 7 of each quarter j of each half h (columns 128h + 32j + l):
// low bits from ql[64h + l] (j 0, 2: low, high nibble) and ql[64h + 32 + l] (j 1, 3), high bits
// 2j, 2j + 1 of qh[32h + l], scale scales[8h + 2j + t / 2]; group gi is half h.
struct q6k_frag {
  using type = block_q6_k;
  static constexpr int G = 4, groups = 2;
  // From 49 tokens a 128-row block's two stages take 122-127 KiB, one block (8 warps) an SM;
  // a 256-row block of 16 warps keeps 16 warps an SM. (At 25-48 tokens two 128-row blocks fit,
  // and 256-row ones were slower at 32.)
  static constexpr int tall_from = 7;
  struct scales {
    float d;
    uint32_t sc[2];  // byte j of sc[h]: the int8 scale of quarter j
  };
  static __device__ __forceinline__ int col(int t, int h, int j) { return 128 * h + 32 * j + 8 * t; }
  static __device__ __forceinline__ scales prepare(const uint8_t* blk, int t) {
    scales s;
    s.d = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(blk + 208)));
    const uint32_t sel = 0x6420u + 0x1111u * static_cast<uint32_t>(t / 2);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint2 b = lds8(blk + 192 + 8 * h);
      s.sc[h] = __byte_perm(b.x, b.y, sel);
    }
    return s;
  }
  static __device__ __forceinline__ void decode(const uint8_t* blk, int t, int h, const scales& s,
                                                uint32_t (&w)[G][4]) {
    const uint2 qa = lds8(blk + 64 * h + 8 * t), qb = lds8(blk + 64 * h + 32 + 8 * t);
    const uint2 qc = lds8(blk + 128 + 32 * h + 8 * t);
    __half2 ds[4];
#pragma unroll
    for (int j = 0; j < 4; ++j)
      ds[j] = __float2half2_rn(__fmul_rn(s.d, float(static_cast<int8_t>((s.sc[h] >> (8 * j)) & 0xffu))));
    const uint32_t a[2] = {qa.x, qa.y}, b[2] = {qb.x, qb.y}, c[2] = {qc.x, qc.y};
    const __half2 bias = __float2half2_rn(1056.f);  // 1024 + 32: the pairs become q - 32
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint32_t v[4] = {(a[k] & 0x0f0f0f0fu) | ((c[k] << 4) & 0x30303030u),
                             (b[k] & 0x0f0f0f0fu) | ((c[k] << 2) & 0x30303030u),
                             ((a[k] >> 4) & 0x0f0f0f0fu) | (c[k] & 0x30303030u),
                             ((b[k] >> 4) & 0x0f0f0f0fu) | ((c[k] >> 2) & 0x30303030u)};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        w[j][2 * k] = bits(__hmul2(__hsub2(magic_pair<0>(v[j]), bias), ds[j]));
        w[j][2 * k + 1] = bits(__hmul2(__hsub2(magic_pair<2>(v[j]), bias), ds[j]));
      }
    }
  }
};

}  // namespace tandem::frag
