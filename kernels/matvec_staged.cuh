// Coalesced decode mat-vec: each warp streams a contiguous chunk of its weight row into shared
// memory with 16-byte loads (the next chunk's loads in flight while this one is decoded), then
// every lane decodes one or two 32/64-weight units from there. Included only by matvec.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/matvec_decode.cuh"

namespace tandem {
namespace mv {

constexpr int k_stage_warps = 4;
constexpr int k_stage_threads = 32 * k_stage_warps;
constexpr int k_max_jobs = 3;

// Up to three matrices of one type and shape that read the same x, in one launch (Q/K/V,
// gate/up): job j owns global rows [row_end[j-1], row_end[j]) and writes y[j].
struct jobs {
  const uint8_t* w[k_max_jobs];
  float* y[k_max_jobs];
  int64_t n_out[k_max_jobs];
  int64_t row_end[k_max_jobs];
  int n = 0;
};

// One chunk = 32 * lane_units units (lane_units per lane; two keep more bytes in flight per
// warp, measured on the H200 to matter more than occupancy). 32 / per_block is a multiple of 8
// blocks and every block size is even, so a chunk is a whole number of 16-byte vectors.
template <class B>
struct stage_traits {
  static constexpr int lane_units = sizeof(B) >= 128 && unit_traits<B>::per_block == 1 ? 1 : 2;  // F32: 1
  static constexpr int blocks = 32 * lane_units / unit_traits<B>::per_block;
  static constexpr int bytes = blocks * static_cast<int>(sizeof(B));
  static constexpr int n16 = bytes / 16;
  static constexpr int vecs = (n16 + 31) / 32;  // 16-byte loads per lane
  static_assert(bytes % 16 == 0, "a chunk must be whole 16-byte vectors");
};

// Weights are read once per token: stream them past L1 so x stays cached there.
__device__ __forceinline__ uint4 ld_weights(const uint4* p) { return __ldcs(p); }

template <class B>
__device__ __forceinline__ int chunk_vecs(int c, int n_blocks) {
  using S = stage_traits<B>;
  const int nb = min(S::blocks, n_blocks - c * S::blocks);
  return (nb * static_cast<int>(sizeof(B)) + 15) / 16;
}

// Requires: every w[j] 16-byte aligned and row_bytes % 16 == 0 (the launcher checks), so the
// last partial chunk of a row never reads past the row's end.
template <class B, int NT>
__global__ void __launch_bounds__(k_stage_threads)
    staged_matvec_kernel(jobs jb, int64_t n_in, int64_t row_bytes, int n_blocks, const float* __restrict__ x,
                         int n_tok, int split, bool add) {
  using U = unit_traits<B>;
  using S = stage_traits<B>;
  __shared__ __align__(16) uint8_t stage[k_stage_warps][S::bytes];
  __shared__ float partial[k_stage_warps][NT];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * k_stage_warps + warp;
  const int64_t row = gw / split;
  const int part = static_cast<int>(gw % split);
  const bool valid = row < jb.row_end[jb.n - 1];
  int j = 0;
  while (j + 1 < jb.n && row >= jb.row_end[j]) ++j;
  const int64_t lr = row - (j > 0 ? jb.row_end[j - 1] : 0);
  const uint8_t* wrow = jb.w[j] + lr * row_bytes;
  const int n_chunks = (n_blocks + S::blocks - 1) / S::blocks;

  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.f;
  uint4 r[S::vecs];
  auto load = [&](int c) {
    const int n16 = chunk_vecs<B>(c, n_blocks);
    const auto* src = reinterpret_cast<const uint4*>(wrow + static_cast<int64_t>(c) * S::bytes);
#pragma unroll
    for (int v = 0; v < S::vecs; ++v)
      if (lane + 32 * v < n16) r[v] = ld_weights(src + lane + 32 * v);
  };
  if (valid && part < n_chunks) load(part);
  auto* st = reinterpret_cast<uint4*>(stage[warp]);
  for (int c = part; valid && c < n_chunks; c += split) {
    const int n16 = chunk_vecs<B>(c, n_blocks);
#pragma unroll
    for (int v = 0; v < S::vecs; ++v)
      if (lane + 32 * v < n16) st[lane + 32 * v] = r[v];
    __syncwarp();
    if (c + split < n_chunks) load(c + split);  // in flight while this chunk is decoded
    const int nb = min(S::blocks, n_blocks - c * S::blocks);
#pragma unroll
    for (int k = 0; k < S::lane_units; ++k) {
      const int u = lane + 32 * k;
      if (u >= nb * U::per_block) break;
      const int bi = u / U::per_block, s = u % U::per_block;
      float wv[U::elems];
      decode<plain_ld>(reinterpret_cast<const B*>(stage[warp])[bi], s, wv);
      const float* xb = x + (static_cast<int64_t>(c) * S::blocks + bi) * U::qk +
                        unit_base(static_cast<const B*>(nullptr), s);
      dot_unit<B, NT>(wv, xb, n_in, n_tok, acc);
    }
    __syncwarp();
  }

#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
  }
  if (split > 1) {
    // The row's split warps share this thread block (split divides k_stage_warps).
    if (lane == 0)
      for (int t = 0; t < NT; ++t) partial[warp][t] = acc[t];
    __syncthreads();
    if (part != 0) return;
    for (int t = 0; t < NT; ++t) {
      float v = 0.f;
      for (int p = 0; p < split; ++p) v += partial[warp + p][t];
      acc[t] = v;
    }
  }
  if (!valid || lane != 0) return;
  for (int t = 0; t < NT && t < n_tok; ++t) {
    float* out = jb.y[j] + static_cast<int64_t>(t) * jb.n_out[j] + lr;
    *out = add ? *out + acc[t] : acc[t];
  }
}

// Splits rows across 2 or 4 warps when there are too few rows to keep every SM's memory
// pipeline full (K/V projections), as long as each warp still gets two or more chunks.
template <class B>
cudaError_t launch_staged(const jobs& jb, int64_t n_in, const float* x, int n_tok, bool add, cudaStream_t stream) {
  using U = unit_traits<B>;
  using S = stage_traits<B>;
  constexpr int64_t k_target_warps = 8192;
  const int64_t n_blocks = n_in / U::qk;
  const int64_t rows = jb.row_end[jb.n - 1];
  const int64_t n_chunks = (n_blocks + S::blocks - 1) / S::blocks;
  int split = 1;
  while (split < k_stage_warps && rows * split < k_target_warps && n_chunks >= 2 * split) split *= 2;
  const int64_t grid = (rows * split + k_stage_warps - 1) / k_stage_warps;
  if (n_blocks > (1 << 30) || grid > 0x7fffffff) return cudaErrorInvalidValue;
  const int64_t row_bytes = n_blocks * static_cast<int64_t>(sizeof(B));
  const auto g = static_cast<unsigned>(grid);
  const int nb = static_cast<int>(n_blocks);
  if (n_tok <= 1)
    staged_matvec_kernel<B, 1><<<g, k_stage_threads, 0, stream>>>(jb, n_in, row_bytes, nb, x, n_tok, split, add);
  else if (n_tok <= 2)
    staged_matvec_kernel<B, 2><<<g, k_stage_threads, 0, stream>>>(jb, n_in, row_bytes, nb, x, n_tok, split, add);
  else if (n_tok <= 4)
    staged_matvec_kernel<B, 4><<<g, k_stage_threads, 0, stream>>>(jb, n_in, row_bytes, nb, x, n_tok, split, add);
  else
    staged_matvec_kernel<B, 8><<<g, k_stage_threads, 0, stream>>>(jb, n_in, row_bytes, nb, x, n_tok, split, add);
  return cudaGetLastError();
}

}  // namespace mv
}  // namespace tandem
