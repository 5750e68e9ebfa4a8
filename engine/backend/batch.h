// A batch: tokens from one or more sequences, each with its sequence id and position, and a flag
// saying whether its logits are wanted. Prefill chunks and decode steps share this one shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem {

struct batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> seq_ids;
  std::vector<int32_t> positions;
  std::vector<uint8_t> want_logits;

  void add(int32_t token, int32_t seq, int32_t pos, bool logits) {
    tokens.push_back(token);
    seq_ids.push_back(seq);
    positions.push_back(pos);
    want_logits.push_back(logits ? 1 : 0);
  }
  size_t size() const { return tokens.size(); }
  size_t n_logits() const {
    size_t n = 0;
    for (auto w : want_logits) n += w != 0;
    return n;
  }
  void clear() { tokens.clear(), seq_ids.clear(), positions.clear(), want_logits.clear(); }
};

}  // namespace tandem
