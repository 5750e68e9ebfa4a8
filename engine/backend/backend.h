// The backend interface: one instance holds a model's weights on its device(s) and runs forward
// passes over batches. CPU and CUDA implement the same entry points; multi-GPU is a property of
// an instance, not of the callers.
#pragma once

#include <memory>
#include <span>
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

  // As forward(), but `ids` receives each logits row's argmax_logits() instead of the row, in
  // the same order: greedy decoding without moving n_vocab floats per token off the device.
  // This default runs forward() into a buffer of its own and picks on the host; the CUDA
  // backend keeps the logits on the GPU.
  virtual status forward_argmax(const batch& b, kv_cache& cache, std::vector<int32_t>& ids);
};

// The greedy pick of one logits row, as every forward_argmax() makes it (the CUDA argmax kernel
// scans the same way): the highest logit, among equals the lowest id; NaN never wins, and a row
// with nothing above -FLT_MAX gives 0.
int32_t argmax_logits(std::span<const float> row);

// Checks a batch against the cache and the vocabulary, the way every backend must before running.
status validate_batch(const batch& b, const kv_cache& cache, uint32_t n_vocab);
// Validates, then grows every sequence of the batch; on failure the cache is as before.
status reserve_batch(const batch& b, kv_cache& cache, uint32_t n_vocab);

}  // namespace tandem
