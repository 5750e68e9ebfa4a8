// The backend interface: one instance holds a model's weights on its device(s) and runs forward
// passes over batches. CPU and CUDA implement the same entry points; multi-GPU is a property of
// an instance, not of the callers.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "backend/batch.h"
#include "backend/kv_cache.h"
#include "core/result.h"
#include "model/model_desc.h"

namespace tandem {

class backend {
 public:
  virtual ~backend() = default;

  virtual std::string_view name() const = 0;
  virtual const model_desc& model() const = 0;
  uint32_t n_vocab() const { return model().hp.n_vocab; }

  // A KV cache whose storage lives where this backend computes.
  virtual result<std::unique_ptr<kv_cache>> make_cache(const kv_cache_config& cfg) = 0;

  // Runs the batch. Each sequence's tokens must come in order, the first at that sequence's
  // current cache length (the cache grows by them). `logits` receives one row of n_vocab floats
  // per token whose want_logits is set, in batch order. Bad input (token id, sequence id,
  // positions, context limit) is an error and leaves the cache unchanged.
  virtual status forward(const batch& b, kv_cache& cache, std::vector<float>& logits) = 0;
};

// Checks a batch against the cache and the vocabulary, the way every backend must before running.
status validate_batch(const batch& b, const kv_cache& cache, uint32_t n_vocab);
// Validates, then grows every sequence of the batch; on failure the cache is as before.
status reserve_batch(const batch& b, kv_cache& cache, uint32_t n_vocab);

}  // namespace tandem
