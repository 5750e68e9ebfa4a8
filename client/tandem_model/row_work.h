// Row-parallel helpers for make and quantize: seeded normal numbers per row (so output bytes do not
// depend on the thread count) and a loop that spreads a tensor's rows over worker threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace tandem {

// Mixes the user's seed with the tensor name into the tensor's own seed.
uint64_t tensor_seed(uint64_t seed, std::string_view tensor_name);

// Fills out[0..n) with N(0, std^2) numbers from the stream of (tensor_seed, row).
void fill_normal_row(uint64_t tensor_seed, uint64_t row, float std_dev, float* out, int64_t n);

// Calls fn(first_row, n_rows, scratch) for consecutive chunks of [0, total_rows) on up to
// n_threads threads; scratch is a float buffer of `scratch_floats` owned by the calling thread.
// Chunks are handed out in order, so fn may assume nothing about which thread runs which chunk.
void for_each_row_chunk(uint64_t total_rows, unsigned n_threads, uint64_t scratch_floats,
                        const std::function<void(uint64_t, uint64_t, float*)>& fn);

// Worker threads to use when the user did not say: all hardware threads.
unsigned default_threads();

}  // namespace tandem
