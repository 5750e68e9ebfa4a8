// Sizes of the tensor split's exchange buffers (kernels/collective.h), in one place for the kernel,
// the CUDA backend that allocates them and the memory plan that charges them.
#pragma once

#include <cstdint>

namespace tandem {

constexpr int k_exchange_max_ranks = 8;
// Every call runs k_exchange_blocks blocks (few, so that the waiting ones never crowd out other
// work on the device; always the same number, so that every block's call counter stays equal to
// its peers'), each moving slices of k_exchange_slice floats.
constexpr int64_t k_exchange_slice = 1024;
constexpr int k_exchange_blocks = 64;
// Floats per inbox slot; a larger message goes in slot-sized pieces.
constexpr int64_t k_exchange_capacity = int64_t(1) << 20;
// Messages up to this many floats (decode: up to 8 tokens of 8192) go as flagged words: each
// float travels with its call counter in one 8-byte store, so the receiver needs no separate flag.
constexpr int64_t k_exchange_words = int64_t(1) << 16;

// Each rank's inbox: two slots (call parity) per source rank, of floats and of flagged words;
// its flags: one per source rank and block.
constexpr int64_t exchange_inbox_floats(int size, int64_t capacity) { return int64_t(size) * 2 * capacity; }
constexpr int64_t exchange_word_count(int size) { return int64_t(size) * 2 * k_exchange_words; }
constexpr int64_t exchange_flag_words(int size) { return int64_t(size) * k_exchange_blocks; }

// What each rank allocates: its inbox and flags as one buffer (device memory with peer access,
// pinned host memory without), and its per-block call counters (device memory).
constexpr uint64_t exchange_box_bytes(int size) {
  return uint64_t(exchange_inbox_floats(size, k_exchange_capacity)) * sizeof(float) +
         uint64_t(exchange_word_count(size)) * sizeof(uint64_t) + uint64_t(exchange_flag_words(size)) * sizeof(uint32_t);
}
constexpr uint64_t exchange_counter_bytes() { return uint64_t(k_exchange_blocks) * sizeof(uint32_t); }

}  // namespace tandem
