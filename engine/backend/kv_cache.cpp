// Bookkeeping of the sequence cache: block allocation, truncation (with the recurrent state's
// checkpoint rule) and the context limit.
#include "backend/kv_cache.h"

namespace tandem {

result<kv_cache_config> normalize_kv_config(kv_cache_config cfg) {
  if (cfg.n_ctx == 0) return make_error("KV cache: context size must be positive");
  if (cfg.n_seq_max == 0) return make_error("KV cache: at least one sequence is needed");
  if (cfg.block_size == 0) return make_error("KV cache: block size must be positive");
  if (cfg.type != ggml_type::f32 && cfg.type != ggml_type::f16 && cfg.type != ggml_type::q8_0)
    return make_error("KV cache: element type ", type_name(cfg.type),
                      " is not supported (use f32, f16 or q8_0)");
  uint64_t per_seq = (uint64_t{cfg.n_ctx} + cfg.block_size - 1) / cfg.block_size;
  if (cfg.n_blocks == 0) {
    uint64_t n = per_seq * cfg.n_seq_max;
    if (n * cfg.block_size > 0x7fffffffull) return make_error("KV cache: too many slots");
    cfg.n_blocks = static_cast<uint32_t>(n);
  }
  if (uint64_t{cfg.n_blocks} * cfg.block_size > 0x7fffffffull)
    return make_error("KV cache: too many slots");
  return cfg;
}

kv_cache::kv_cache(const kv_cache_config& cfg, const recurrent_layout& rec)
    : cfg_(cfg), rec_(rec), seqs_(cfg.n_seq_max) {
  free_.reserve(cfg_.n_blocks);
  for (uint32_t b = cfg_.n_blocks; b-- > 0;) free_.push_back(b);  // hand out block 0 first
}

status kv_cache::grow(int32_t seq, uint32_t new_length) {
  if (!valid_seq(seq))
    return make_error("sequence id ", seq, " is out of range (0..", cfg_.n_seq_max - 1, ")");
  if (new_length > cfg_.n_ctx)
    return make_error("context limit reached: sequence ", seq, " would hold ", new_length,
                      " tokens but the context size is ", cfg_.n_ctx);
  auto& s = seqs_[seq];
  size_t need = (size_t{new_length} + cfg_.block_size - 1) / cfg_.block_size;
  if (need > s.blocks.size() && need - s.blocks.size() > free_.size())
    return make_error("KV cache is full: sequence ", seq, " needs ", need - s.blocks.size(),
                      " more blocks, ", free_.size(), " free");
  while (s.blocks.size() < need) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  if (new_length > s.length) s.length = new_length;
  return {};
}

void kv_cache::drop_blocks(seq_state& s, uint32_t length) {
  s.length = length;
  size_t keep = (size_t{length} + cfg_.block_size - 1) / cfg_.block_size;
  while (s.blocks.size() > keep) {
    free_.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
}

uint32_t kv_cache::truncate(int32_t seq, uint32_t length) {
  if (!valid_seq(seq)) return 0;
  auto& s = seqs_[seq];
  if (length >= s.length) return s.length;
  if (!has_recurrent() || length >= s.state_length || length == 0) {
    // Slots reserved but not yet folded into the state (a refused batch) go back freely.
    drop_blocks(s, length);
    if (length == 0) s.state_length = 0, s.checkpoint = k_no_checkpoint;
    return length;
  }
  if (s.state_length != k_state_unknown && length == s.checkpoint && restore_state(seq).ok()) {
    drop_blocks(s, length);
    s.state_length = length;
    return length;
  }
  drop_blocks(s, 0);
  s.state_length = 0;
  s.checkpoint = k_no_checkpoint;
  return 0;
}

status kv_cache::checkpoint(int32_t seq) {
  if (!valid_seq(seq)) return make_error("sequence id ", seq, " is out of range");
  if (!has_recurrent()) return {};
  auto& s = seqs_[seq];
  if (s.state_length != s.length)
    return make_error("sequence ", seq, ": its recurrent state does not hold all ", s.length, " tokens");
  TANDEM_TRY(save_state(seq));
  s.checkpoint = s.length;
  return {};
}

void kv_cache::clear_all() {
  for (int32_t s = 0; s < static_cast<int32_t>(seqs_.size()); ++s) clear(s);
}

}  // namespace tandem
