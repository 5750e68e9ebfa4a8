// The attention KV cache of a model instance: fixed-size blocks of token slots, a block table per
// sequence, and the context limit. Backends derive from kv_cache to own the element storage
// (host memory for the CPU, device memory for CUDA); the bookkeeping here is shared.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"
#include "quant/ggml_type.h"

namespace tandem {

struct kv_cache_config {
  uint32_t n_ctx = 4096;      // most tokens one sequence may hold
  uint32_t n_seq_max = 1;     // sequence ids are 0 .. n_seq_max-1
  uint32_t block_size = 16;   // token slots per block
  uint32_t n_blocks = 0;      // 0: enough for every sequence at full context
  ggml_type type = ggml_type::f16;  // f32, f16 or q8_0
};

class kv_cache {
 public:
  explicit kv_cache(const kv_cache_config& cfg);
  virtual ~kv_cache() = default;
  kv_cache(const kv_cache&) = delete;
  kv_cache& operator=(const kv_cache&) = delete;

  const kv_cache_config& config() const { return cfg_; }
  virtual uint64_t bytes() const = 0;  // element storage of all blocks

  uint32_t length(int32_t seq) const { return seqs_[seq].length; }
  bool valid_seq(int32_t seq) const { return seq >= 0 && uint32_t(seq) < cfg_.n_seq_max; }
  uint32_t free_blocks() const { return static_cast<uint32_t>(free_.size()); }

  // Grows the sequence to new_length tokens, allocating blocks. Fails with a clear message past
  // the context limit or when the pool is exhausted; on failure nothing changes.
  status grow(int32_t seq, uint32_t new_length);
  // Drops tokens from position `length` on, returning whole blocks to the pool.
  void truncate(int32_t seq, uint32_t length);
  void clear(int32_t seq) { truncate(seq, 0); }
  void clear_all();

  // Global slot index of (seq, pos); pos < length(seq).
  uint32_t slot(int32_t seq, uint32_t pos) const {
    const auto& s = seqs_[seq];
    return s.blocks[pos / cfg_.block_size] * cfg_.block_size + pos % cfg_.block_size;
  }
  uint32_t n_slots() const { return cfg_.n_blocks * cfg_.block_size; }

 private:
  struct seq_state {
    uint32_t length = 0;
    std::vector<uint32_t> blocks;
  };
  kv_cache_config cfg_;
  std::vector<seq_state> seqs_;
  std::vector<uint32_t> free_;  // a stack of free block ids
};

// Checks a configuration (non-zero sizes, a supported element type) and fills n_blocks.
result<kv_cache_config> normalize_kv_config(kv_cache_config cfg);

}  // namespace tandem
