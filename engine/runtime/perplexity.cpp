// Chunked perplexity over a token stream.
#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

namespace tandem {

double log_softmax_at(std::span<const float> logits, int32_t target) {
  float mx = logits[0];
  for (float v : logits) mx = std::max(mx, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - mx);
  return double(logits[size_t(target)]) - mx - std::log(sum);
}

result<perplexity_result> perplexity(backend& be, kv_cache& cache, std::span<const int32_t> tokens,
                                     const perplexity_params& params,
                                     const perplexity_progress& progress) {
  const uint32_t n_ctx = params.n_ctx;
  if (n_ctx < 4) return make_error("perplexity: context of ", n_ctx, " tokens is too small");
  if (cache.config().n_ctx < n_ctx)
    return make_error("perplexity: the cache holds ", cache.config().n_ctx, " tokens, less than ",
                      n_ctx);
  if (tokens.size() < 2ull * n_ctx)
    return make_error("perplexity: need at least ", 2ull * n_ctx, " tokens for a context of ", n_ctx,
                      ", the text has ", tokens.size());
  size_t n_chunks = tokens.size() / n_ctx;
  if (params.max_chunks >= 0) n_chunks = std::min(n_chunks, size_t(params.max_chunks));
  const uint32_t first = n_ctx / 2;
  const uint32_t n_vocab = be.n_vocab();
  perplexity_result res;
  double nll = 0, nll2 = 0;
  std::vector<float> logits, chunk_logits;
  for (size_t c = 0; c < n_chunks; ++c) {
    cache.clear(0);
    const int32_t* chunk = tokens.data() + c * n_ctx;
    chunk_logits.clear();
    for (uint32_t start = 0; start < n_ctx; start += std::max<uint32_t>(1, params.n_batch)) {
      const uint32_t end = std::min(n_ctx, start + std::max<uint32_t>(1, params.n_batch));
      batch b;
      for (uint32_t i = start; i < end; ++i) {
        const int32_t tok = (i == 0 && params.bos_id >= 0) ? params.bos_id : chunk[i];
        // Only positions first .. n_ctx-2 are scored; the rest need no logits.
        b.add(tok, 0, int32_t(i), i >= first && i + 1 < n_ctx);
      }
      TANDEM_TRY(be.forward(b, cache, logits));
      chunk_logits.insert(chunk_logits.end(), logits.begin(), logits.end());
    }
    for (uint32_t i = first; i + 1 < n_ctx; ++i) {
      std::span<const float> row(chunk_logits.data() + size_t(i - first) * n_vocab, n_vocab);
      const double lp = log_softmax_at(row, chunk[i + 1]);
      nll -= lp;
      nll2 += lp * lp;
      ++res.n_scored;
    }
    res.running.push_back(std::exp(nll / double(res.n_scored)));
    if (progress) progress(c + 1, n_chunks, res.running.back());
  }
  cache.clear(0);
  res.n_chunks = n_chunks;
  const double mean = nll / double(res.n_scored);
  res.ppl = std::exp(mean);
  const double var = nll2 / double(res.n_scored) - mean * mean;
  res.ppl_error = var > 0 && res.n_scored > 1 ? std::sqrt(var / double(res.n_scored - 1)) * res.ppl : 0;
  return res;
}

}  // namespace tandem
