// What the layer split and the tensor split share: one model over several cuda_stages, a cache
// with one K/V part per stage, the batch checks, and the logits read from one stage.
#pragma once

#include <memory>
#include <vector>

#include "backend/cuda/cuda_stage.h"

namespace tandem {

class cuda_multi_backend : public cuda_backend_api {
 public:
  cuda_multi_backend(const model_desc& desc, std::vector<std::unique_ptr<cuda_stage>> stages, size_t output);

  std::string_view name() const override { return "cuda"; }
  const model_desc& model() const override { return desc_; }
  const cuda_load_stats& load_stats() const override { return stats_; }
  // Summed over the stages (a layer split reads them in turn, a tensor split at the same time).
  uint64_t weight_bytes_per_token() const override;
  // Steps, counted once (on the stage that produces the logits).
  uint64_t graph_replays() const override { return stages_[output_]->graph_replays(); }
  result<std::unique_ptr<kv_cache>> make_cache(const kv_cache_config& cfg) override;
  status forward(const batch& b, kv_cache& cache, std::vector<float>& logits) override;
  status forward_argmax(const batch& b, kv_cache& cache, std::vector<int32_t>& ids) override;

 protected:
  // Enqueues the batch on the stages, the cache already grown for it; with argmax the output
  // stage also leaves each logits row's argmax for copy_out.
  virtual status run_stages(const batch& b, cuda_stage_cache& cache, bool argmax) = 0;

  model_desc desc_;
  std::vector<std::unique_ptr<cuda_stage>> stages_;
  size_t output_;  // the stage holding the output head
  cuda_load_stats stats_;

 private:
  status run(const batch& b, kv_cache& cache, bool argmax);
};

}  // namespace tandem
