// One-shot sums and broadcasts of float buffers across the devices of a tensor split, done by a
// kernel on each device that pushes its slice into every peer's inbox (device memory reached over
// peer access, or mapped pinned host memory where there is none) and raises a flag there.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/exchange_layout.h"

namespace tandem {

// What one rank's kernels see. Rank r's inbox holds, for every source rank s, two slots (the
// parity of the call) of `capacity` floats: slot (s, p) at inbox[r] + (s * 2 + p) * capacity,
// and two of k_exchange_words flagged words at words[r] + (s * 2 + p) * k_exchange_words (float
// bits low, call counter high). Its flags hold one counter per source rank and block:
// flags[r][s * k_exchange_blocks + b].
struct exchange_view {
  int rank = 0, size = 0;
  int64_t capacity = 0;  // floats per slot; a multiple of k_exchange_slice
  float* inbox[k_exchange_max_ranks] = {};
  uint64_t* words[k_exchange_max_ranks] = {};
  uint32_t* flags[k_exchange_max_ranks] = {};
  uint32_t* epochs = nullptr;  // this rank's per-block call counters (its device memory)
};

// x (n floats on this rank's device, n <= capacity) becomes the sum over the ranks' x, added in
// rank order so that every rank gets the same bits. Every rank must make the same calls with the
// same n in the same order; a rank whose peer never arrives traps after 30 s instead of hanging.
cudaError_t launch_exchange_sum(const exchange_view& v, float* x, int64_t n, cudaStream_t stream);

// Every rank's x becomes root's.
cudaError_t launch_exchange_broadcast(const exchange_view& v, float* x, int64_t n, int root, cudaStream_t stream);

}  // namespace tandem
