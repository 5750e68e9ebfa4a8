// Chunked perplexity the way llama.cpp's perplexity tool computes it: the token stream is cut
// into non-overlapping chunks of n_ctx tokens (the remainder is dropped); when the model adds BOS,
// each chunk's first token is replaced by BOS; each chunk runs from an empty cache, and only the
// predictions of its second half are scored (positions n_ctx/2 .. n_ctx-2 predicting the next
// token), n_ctx - 1 - n_ctx/2 tokens per chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"

namespace tandem {

struct perplexity_params {
  uint32_t n_ctx = 512;    // chunk length (llama.cpp's default)
  int32_t bos_id = -1;     // >= 0: replaces each chunk's first token (the model adds BOS)
  uint32_t n_batch = 512;  // tokens per forward pass
  int32_t max_chunks = -1; // < 0: all
};

struct perplexity_result {
  double ppl = 0;
  double ppl_error = 0;  // llama.cpp's "+/-": stddev of the log-probs / sqrt(n-1), times ppl
  size_t n_chunks = 0;
  size_t n_scored = 0;
  std::vector<double> running;  // the running estimate after each chunk, as llama.cpp prints
};

// Called after each chunk with (chunks done, total, running perplexity).
using perplexity_progress = std::function<void(size_t, size_t, double)>;

// Needs at least 2 * n_ctx tokens (as llama.cpp does) and a cache of context >= n_ctx; uses
// sequence 0 of the cache.
result<perplexity_result> perplexity(backend& be, kv_cache& cache, std::span<const int32_t> tokens,
                                     const perplexity_params& params,
                                     const perplexity_progress& progress = {});

// log p(target) from one row of logits, computed in double.
double log_softmax_at(std::span<const float> logits, int32_t target);

}  // namespace tandem
