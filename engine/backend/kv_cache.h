// The per-sequence state of a model instance: the attention KV cache in fixed-size blocks of token
// slots with a block table per sequence, and, for hybrid models, each sequence's recurrent state per
// Gated DeltaNet layer (conv inputs and S). Backends derive from kv_cache to own the element storage
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

// The recurrent state a hybrid model keeps per sequence: n_layers DeltaNet layers, each with
// conv_floats + ssm_floats fp32 values. Zero layers: a plain attention model.
struct recurrent_layout {
  uint32_t n_layers = 0;
  uint64_t conv_floats = 0;  // (K-1) × conv_dim
  uint64_t ssm_floats = 0;   // Hv × dk × dv
  uint64_t floats_per_seq() const { return n_layers * (conv_floats + ssm_floats); }
};

class kv_cache {
 public:
  explicit kv_cache(const kv_cache_config& cfg, const recurrent_layout& rec = {});
  virtual ~kv_cache() = default;
  kv_cache(const kv_cache&) = delete;
  kv_cache& operator=(const kv_cache&) = delete;

  const kv_cache_config& config() const { return cfg_; }
  const recurrent_layout& recurrent() const { return rec_; }
  bool has_recurrent() const { return rec_.n_layers > 0; }
  virtual uint64_t bytes() const = 0;  // element storage of all blocks and all recurrent state
  // The recurrent part of bytes(): every sequence's state plus its checkpoint.
  uint64_t recurrent_bytes() const { return 2 * uint64_t{cfg_.n_seq_max} * rec_.floats_per_seq() * sizeof(float); }

  uint32_t length(int32_t seq) const { return seqs_[seq].length; }
  bool valid_seq(int32_t seq) const { return seq >= 0 && uint32_t(seq) < cfg_.n_seq_max; }
  uint32_t free_blocks() const { return static_cast<uint32_t>(free_.size()); }

  // Grows the sequence to new_length tokens, allocating blocks. Fails with a clear message past
  // the context limit or when the pool is exhausted; on failure nothing changes.
  status grow(int32_t seq, uint32_t new_length);
  // Drops tokens from position `length` on, returning whole blocks to the pool, and returns the
  // length kept. A recurrent state cannot be rewound: past tokens already folded into it are only
  // dropped exactly back to the sequence's checkpoint (restored), or else the whole sequence is
  // dropped (0 is returned and the caller prefills again). Never a state that does not match.
  uint32_t truncate(int32_t seq, uint32_t length);
  void clear(int32_t seq) { truncate(seq, 0); }
  void clear_all();

  // Recurrent state bookkeeping, for backends: the state of `seq` holds its first state_length
  // tokens. A backend marks it unknown before it updates the state and sets it after success, so a
  // failed step leaves a sequence that refuses to continue until it is cleared.
  static constexpr uint32_t k_state_unknown = UINT32_MAX;
  uint32_t state_length(int32_t seq) const { return seqs_[seq].state_length; }
  void set_state_length(int32_t seq, uint32_t n) { seqs_[seq].state_length = n; }
  // Saves the recurrent state at the current length as the sequence's checkpoint (one per
  // sequence; a later truncate to exactly that length restores it). A no-op without state.
  status checkpoint(int32_t seq);
  uint32_t checkpoint_length(int32_t seq) const { return seqs_[seq].checkpoint; }

  // Global slot index of (seq, pos); pos < length(seq).
  uint32_t slot(int32_t seq, uint32_t pos) const {
    const auto& s = seqs_[seq];
    return s.blocks[pos / cfg_.block_size] * cfg_.block_size + pos % cfg_.block_size;
  }
  uint32_t n_slots() const { return cfg_.n_blocks * cfg_.block_size; }

 protected:
  // Backends with recurrent state copy it to the checkpoint storage and back.
  virtual status save_state(int32_t /*seq*/) { return make_error("this cache keeps no recurrent state"); }
  virtual status restore_state(int32_t /*seq*/) { return make_error("this cache keeps no recurrent state"); }

 private:
  static constexpr uint32_t k_no_checkpoint = UINT32_MAX;
  struct seq_state {
    uint32_t length = 0;
    uint32_t state_length = 0;
    uint32_t checkpoint = k_no_checkpoint;
    std::vector<uint32_t> blocks;
  };
  void drop_blocks(seq_state& s, uint32_t length);
  kv_cache_config cfg_;
  recurrent_layout rec_;
  std::vector<seq_state> seqs_;
  std::vector<uint32_t> free_;  // a stack of free block ids
};

// Checks a configuration (non-zero sizes, a supported element type) and fills n_blocks.
result<kv_cache_config> normalize_kv_config(kv_cache_config cfg);

}  // namespace tandem
