// Batch validation and cache reservation shared by every backend, and the host argmax that
// backends without a device-side one use for forward_argmax.
#include "backend/backend.h"

#include <cfloat>
#include <map>

namespace tandem {

// Sequential form of launch_argmax (kernels/layer_ops.cu): strictly greater replaces, so the
// first of equal maxima stays; the -FLT_MAX start skips NaN, -inf and -FLT_MAX itself.
int32_t argmax_logits(std::span<const float> row) {
  float best = -FLT_MAX;
  size_t at = row.size();
  for (size_t i = 0; i < row.size(); ++i)
    if (row[i] > best) best = row[i], at = i;
  return at < row.size() ? int32_t(at) : 0;
}

status backend::forward_argmax(const batch& b, kv_cache& cache, std::vector<int32_t>& ids) {
  // A local buffer rather than a member: the default adds no state to the backend, and a host
  // backend's forward costs far more than the allocation.
  std::vector<float> logits;
  TANDEM_TRY(forward(b, cache, logits));
  const size_t V = n_vocab();
  ids.resize(V == 0 ? 0 : logits.size() / V);
  for (size_t r = 0; r < ids.size(); ++r) ids[r] = argmax_logits(std::span<const float>(logits).subspan(r * V, V));
  return {};
}

status validate_batch(const batch& b, const kv_cache& cache, uint32_t n_vocab) {
  const size_t n = b.tokens.size();
  if (b.seq_ids.size() != n || b.positions.size() != n || b.want_logits.size() != n)
    return make_error("batch: token, sequence, position and logits lists differ in length");
  if (n == 0) return make_error("batch is empty");
  std::map<int32_t, uint32_t> next;  // expected position of each sequence's next token
  for (size_t i = 0; i < n; ++i) {
    const int32_t tok = b.tokens[i], seq = b.seq_ids[i], pos = b.positions[i];
    if (tok < 0 || uint32_t(tok) >= n_vocab)
      return make_error("batch token ", i, ": id ", tok, " is outside the vocabulary (", n_vocab,
                        " tokens)");
    if (!cache.valid_seq(seq))
      return make_error("batch token ", i, ": sequence id ", seq, " is out of range (0..",
                        cache.config().n_seq_max - 1, ")");
    auto [it, first] = next.try_emplace(seq, cache.length(seq));
    // Recurrent layers fold a sequence's tokens in order as one run of consecutive rows.
    if (!first && cache.has_recurrent() && b.seq_ids[i - 1] != seq)
      return make_error("batch token ", i, ": sequence ", seq, "'s tokens are not consecutive; a model with ",
                        "recurrent layers needs each sequence's tokens together in the batch");
    if (first && cache.has_recurrent() && cache.state_length(seq) != cache.length(seq))
      return make_error("batch token ", i, ": sequence ", seq, "'s recurrent state was lost by a failed step; ",
                        "clear the sequence and prefill it again");
    if (pos < 0 || uint32_t(pos) != it->second)
      return make_error("batch token ", i, ": sequence ", seq, " expects position ", it->second,
                        ", got ", pos);
    ++it->second;
  }
  for (const auto& [seq, len] : next)
    if (len > cache.config().n_ctx)
      return make_error("context limit reached: sequence ", seq, " would hold ", len,
                        " tokens but the context size is ", cache.config().n_ctx);
  return {};
}

status reserve_batch(const batch& b, kv_cache& cache, uint32_t n_vocab) {
  TANDEM_TRY(validate_batch(b, cache, n_vocab));
  std::map<int32_t, uint32_t> old_len, new_len;
  for (size_t i = 0; i < b.size(); ++i) {
    old_len.try_emplace(b.seq_ids[i], cache.length(b.seq_ids[i]));
    new_len[b.seq_ids[i]] = uint32_t(b.positions[i]) + 1;
  }
  for (const auto& [seq, len] : new_len) {
    status s = cache.grow(seq, len);
    if (!s) {
      for (const auto& [s2, l2] : old_len) cache.truncate(s2, l2);
      return s;
    }
  }
  return {};
}

}  // namespace tandem
