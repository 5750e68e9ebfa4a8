// What the flash-attention prefill kernels share (kernels/flash_attention.cu's WMMA blocks and
// kernels/flash_attention_mma.cu's mma.sync blocks): the launch's run table and reading cache rows.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/flash_attention.h"

namespace tandem {
namespace flash {

constexpr int k_max_runs = 32;  // runs per launch: they travel by value in the parameters

// Marks a cache of Q8_0 rows: each head's row is head_dim/32 blocks of 34 bytes (blocks.h).
struct q8_row {};

// The launch's runs and the first block of each (blocks numbered run after run).
struct run_table {
  flash_run run[k_max_runs];
  int tile0[k_max_runs];
  int n_runs;
};

struct params {
  const float* q;
  const void* k_cache;
  const void* v_cache;
  float* out;
  const int32_t* tables;
  int n_head, n_head_kv, block_size, max_blocks;
  float qscale;  // scale · log2(e): scores come out in log2 units for exp2f
  run_table runs;
};

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// Eight consecutive values (from column col, a multiple of 8) of cache row `row` as fp16.
template <int D, class T>
__device__ __forceinline__ uint4 load8(const void* cache, int64_t row, int col) {
  if constexpr (sizeof(T) == 2) {
    return *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(cache) + row * D + col);
  } else {
    const float* p = static_cast<const float*>(cache) + row * D + col;
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    return make_uint4(pack_half2(a.x, a.y), pack_half2(a.z, a.w), pack_half2(b.x, b.y), pack_half2(b.z, b.w));
  }
}

// Q8_0: value = d · q as dequantize_row (exact in fp32, then rounded to fp16). Blocks are only
// 2-byte aligned, hence the 2-byte loads.
template <int D>
__device__ __forceinline__ uint4 load8_q8(const void* cache, int64_t row, int col) {
  const uint8_t* blk = static_cast<const uint8_t*>(cache) + row * (D / 32 * 34) + (col / 32) * 34;
  const float d = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(blk)));
  const uint16_t* qs = reinterpret_cast<const uint16_t*>(blk + 2 + col % 32);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint16_t pair = qs[i];
    w[i] = pack_half2(d * static_cast<float>(static_cast<int8_t>(pair & 0xff)),
                      d * static_cast<float>(static_cast<int8_t>(pair >> 8)));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <int D, class T>
__device__ __forceinline__ uint4 load_cache8(const void* cache, int64_t row, int col) {
  if constexpr (std::is_same<T, q8_row>::value)
    return load8_q8<D>(cache, row, col);
  else
    return load8<D, T>(cache, row, col);
}

// The cache row of key j of kv head kvh, through the sequence's block table.
__device__ __forceinline__ int64_t cache_row(const params& p, const int32_t* table, int j, int kvh) {
  const int64_t slot = static_cast<int64_t>(table[j / p.block_size]) * p.block_size + j % p.block_size;
  return slot * p.n_head_kv + kvh;
}

// The block's run and tile: blocks are numbered run after run, and taken from the last, so that
// the tiles with the most keys (the end of a run) start first.
__device__ __forceinline__ void find_tile(const run_table& t, flash_run& run, int& tile) {
  const int blk = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  tile = -1;
#pragma unroll
  for (int i = 0; i < k_max_runs; ++i)  // static indices: the table stays in parameter space
    if (i < t.n_runs && blk >= t.tile0[i]) run = t.run[i], tile = blk - t.tile0[i];
}

// The output row of (token, head) unit u of a run: units are token-major within a KV head's
// group, so a tile is any run of consecutive units and GQA ratios need not divide it.
__device__ __forceinline__ int64_t unit_row(const params& p, const flash_run& run, int kvh, int grp, int u) {
  return static_cast<int64_t>(run.t0 + u / grp) * p.n_head + kvh * grp + u % grp;
}

}  // namespace flash

// The mma.sync blocks (sm_80+), kernels/flash_attention_mma.cu: rows per block for a head size
// (0: that size has no such block), and a launch of `tiles` blocks per KV head over p.runs.
int flash_mma_rows(int head_dim, flash_kernel k);
cudaError_t launch_flash_mma(const flash::params& p, int head_dim, ggml_type type, flash_kernel k, int tiles,
                             int n_head_kv, cudaStream_t stream);

}  // namespace tandem
