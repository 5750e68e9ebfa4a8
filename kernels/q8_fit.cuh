// The q8_0 KV cache's block fit on the GPU, bit for bit the CPU's quantize_row (a value stored from
// the GPU must read back exactly as the CPU would have stored it). Included only by attention.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/quant_blocks.cuh"

namespace tandem {
namespace kvq {

// quantize_row fits each block's scale with search_symmetric_scale (quant/k_quant_search.cpp):
// weights w = rms + |x|, 40 candidate inverse scales -(128 + 0.1 k) / vmax (k = -30..9), each
// scored by sum(w x l)^2 / sum(w l^2), then up to 4 re-fits at 1 / scale. The CPU build sums
// those two series in 4 interleaved lanes (i mod 4, `omp simd`), adds the lanes 0..3 in order,
// and never fuses multiply-adds; every float operation below is spelled with a _rn intrinsic so
// that it rounds exactly as there. One warp quantizes one block for small batches (latency), one
// thread per block for large ones (throughput).

constexpr int k_q8_cands = 40, k_q8_steps_down = 30;

struct q8_warp_smem {
  float x[32], w[32];
  float part[k_q8_cands][4][2];  // per candidate and lane group: sum(w x l), sum(w l^2)
  float sums[k_q8_cands][4];     // sum(w x l), sum(w l^2), its score and its scale
};

__device__ __forceinline__ int round_int_exact(float v) {  // quant_impl.h's round_int
  const uint32_t u = __float_as_uint(__fadd_rn(v, 12582912.0f));
  return static_cast<int>(u & 0x007fffffu) - 0x00400000;
}

__device__ __forceinline__ float q8_level(float iscale, float x) {
  return static_cast<float>(min(max(round_int_exact(__fmul_rn(iscale, x)), -128), 127));
}

// Lane group j's share of the two sums: elements j, j+4, ..., j+28 in order.
__device__ __forceinline__ void q8_partial(const q8_warp_smem& s, float iscale, int j, float& sxl, float& sll) {
  sxl = 0.f, sll = 0.f;
#pragma unroll
  for (int i = j; i < 32; i += 4) {
    const float l = q8_level(iscale, s.x[i]);
    sxl = __fadd_rn(sxl, __fmul_rn(__fmul_rn(s.w[i], s.x[i]), l));
    sll = __fadd_rn(sll, __fmul_rn(__fmul_rn(s.w[i], l), l));
  }
}

__device__ __forceinline__ float q8_combine(const float (&p)[4][2], int k) {
  float v = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) v = __fadd_rn(v, p[j][k]);
  return v;
}

// The CPU's acceptance test for a candidate (its best_iscale only shapes levels that
// fit_symmetric_block recomputes, so it is not tracked).
__device__ __forceinline__ bool q8_wins(float sxl, float sll, float best_score) {
  return sll > 0.f && __fmul_rn(sxl, sxl) > __fmul_rn(best_score, sll);
}

// Quantizes the warp's 32 values (lane i holds x) into the block at dst.
inline __device__ void quantize_q8_0_warp(float x, q8_warp_smem& s, uint8_t* dst) {
  const int lane = threadIdx.x % 32;
  // Largest magnitude, first index on ties (the CPU scans with a strict >).
  float a = fabsf(x);
  int idx = lane;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float a2 = __shfl_xor_sync(0xffffffffu, a, o);
    const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
    if (a2 > a || (a2 == a && i2 < idx)) a = a2, idx = i2;
  }
  const float amax = a, vmax = __shfl_sync(0xffffffffu, x, idx);
  s.x[lane] = x;
  s.w[lane] = __fmul_rn(x, x);
  __syncwarp();
  float sum2 = 0.f;  // default_weights: a plain sequential sum
  for (int i = 0; i < 32; ++i) sum2 = __fadd_rn(sum2, s.w[i]);
  const float rms = __fsqrt_rn(__fdiv_rn(sum2, 32.f));
  __syncwarp();
  s.w[lane] = __fadd_rn(rms, fabsf(x));
  __syncwarp();

  float best_scale = 0.f;
  if (amax >= 1e-30f) {  // search_symmetric_scale's `tiny`
    for (int task = lane; task < 4 * k_q8_cands; task += 32) {
      const int c = task / 4, j = task % 4;
      const float k = static_cast<float>(c - k_q8_steps_down);
      const float iscale = __fdiv_rn(-__fadd_rn(__fmul_rn(k, 0.1f), 128.f), vmax);
      q8_partial(s, iscale, j, s.part[c][j][0], s.part[c][j][1]);
    }
    __syncwarp();
    // The divisions of every candidate in parallel; the serial scan below only compares.
    for (int c = lane; c < k_q8_cands; c += 32) {
      const float sxl = q8_combine(s.part[c], 0), sll = q8_combine(s.part[c], 1);
      s.sums[c][0] = sxl, s.sums[c][1] = sll;
      s.sums[c][2] = sll > 0.f ? __fdiv_rn(__fmul_rn(sxl, sxl), sll) : 0.f;
      s.sums[c][3] = sll > 0.f ? __fdiv_rn(sxl, sll) : 0.f;
    }
    __syncwarp();
    float best_score = -1.f;
    for (int c = 0; c < k_q8_cands; ++c)
      if (q8_wins(s.sums[c][0], s.sums[c][1], best_score)) best_score = s.sums[c][2], best_scale = s.sums[c][3];
    for (int it = 0; it < 4 && best_scale != 0.f; ++it) {
      const float iscale = __fdiv_rn(1.f, best_scale);
      __syncwarp();
      if (lane < 4) q8_partial(s, iscale, lane, s.part[0][lane][0], s.part[0][lane][1]);
      __syncwarp();
      const float sxl = q8_combine(s.part[0], 0), sll = q8_combine(s.part[0], 1);
      if (!q8_wins(sxl, sll, best_score)) break;
      best_score = __fdiv_rn(__fmul_rn(sxl, sxl), sll), best_scale = __fdiv_rn(sxl, sll);
    }
  }
  // fit_symmetric_block: round against the stored fp16 scale.
  const uint16_t d16 = float_to_fp16(best_scale);
  const float d = fp16_to_float(d16);
  const float id = d != 0.f ? __fdiv_rn(1.f, d) : 0.f;
  dst[2 + lane] = static_cast<uint8_t>(static_cast<int8_t>(min(max(round_int_exact(__fmul_rn(x, id)), -128), 127)));
  if (lane == 0) *reinterpret_cast<uint16_t*>(dst) = d16;
}

// The same fit by one thread with the block in registers: the full work of a block without the
// warp version's idle lanes in its serial parts, for batches with thousands of blocks.
__device__ __forceinline__ void q8_sums(const float (&x)[32], const float (&w)[32], float iscale, float& sxl,
                                        float& sll) {
  float px[4] = {0.f, 0.f, 0.f, 0.f}, pl[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const float l = q8_level(iscale, x[i]);
    px[i % 4] = __fadd_rn(px[i % 4], __fmul_rn(__fmul_rn(w[i], x[i]), l));
    pl[i % 4] = __fadd_rn(pl[i % 4], __fmul_rn(__fmul_rn(w[i], l), l));
  }
  sxl = 0.f, sll = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) sxl = __fadd_rn(sxl, px[j]), sll = __fadd_rn(sll, pl[j]);
}

inline __device__ void quantize_q8_0_thread(const float* __restrict__ src, uint8_t* dst) {
  float x[32], w[32];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 v = reinterpret_cast<const float4*>(src)[i];
    x[4 * i] = v.x, x[4 * i + 1] = v.y, x[4 * i + 2] = v.z, x[4 * i + 3] = v.w;
  }
  float amax = 0.f, vmax = 0.f, sum2 = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const float a = fabsf(x[i]);
    if (a > amax) amax = a, vmax = x[i];
    sum2 = __fadd_rn(sum2, __fmul_rn(x[i], x[i]));
  }
  const float rms = __fsqrt_rn(__fdiv_rn(sum2, 32.f));
#pragma unroll
  for (int i = 0; i < 32; ++i) w[i] = __fadd_rn(rms, fabsf(x[i]));
  float best_scale = 0.f;
  if (amax >= 1e-30f) {
    float best_score = -1.f, sxl, sll;
#pragma unroll 1
    for (int c = 0; c < k_q8_cands; ++c) {
      const float k = static_cast<float>(c - k_q8_steps_down);
      q8_sums(x, w, __fdiv_rn(-__fadd_rn(__fmul_rn(k, 0.1f), 128.f), vmax), sxl, sll);
      if (q8_wins(sxl, sll, best_score))
        best_score = __fdiv_rn(__fmul_rn(sxl, sxl), sll), best_scale = __fdiv_rn(sxl, sll);
    }
#pragma unroll 1
    for (int it = 0; it < 4 && best_scale != 0.f; ++it) {
      q8_sums(x, w, __fdiv_rn(1.f, best_scale), sxl, sll);
      if (!q8_wins(sxl, sll, best_score)) break;
      best_score = __fdiv_rn(__fmul_rn(sxl, sxl), sll), best_scale = __fdiv_rn(sxl, sll);
    }
  }
  const uint16_t d16 = float_to_fp16(best_scale);
  const float d = fp16_to_float(d16);
  const float id = d != 0.f ? __fdiv_rn(1.f, d) : 0.f;
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);  // blocks are 2-byte aligned
  out[0] = d16;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int lo = min(max(round_int_exact(__fmul_rn(x[2 * i], id)), -128), 127);
    const int hi = min(max(round_int_exact(__fmul_rn(x[2 * i + 1], id)), -128), 127);
    out[1 + i] = static_cast<uint16_t>((lo & 0xff) | ((hi & 0xff) << 8));
  }
}

}  // namespace kvq
}  // namespace tandem
