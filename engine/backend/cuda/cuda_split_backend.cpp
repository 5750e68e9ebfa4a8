// The layer split: one model over several GPUs by contiguous layer ranges, each range a
// cuda_stage on its device, run in order with the residual stream handed from one to the next.
#include "backend/cuda/cuda_stage.h"

#include <string>
#include <utility>

namespace tandem {
namespace {

// One model over several GPUs by layer ranges: each stage holds its layers and their K/V;
// a forward pass runs them in order, each device taking the previous one's activations
// (peer-to-peer where the devices allow it, else the driver stages through host memory).
class cuda_split_backend final : public cuda_backend_api {
 public:
  explicit cuda_split_backend(const model_desc& desc) : desc_(desc) {}

  void add_stage(std::unique_ptr<cuda_stage> st) {
    const auto& ls = st->load_stats();
    stats_.bytes += ls.bytes;
    stats_.seconds += ls.seconds;
    stats_.device_bytes += ls.device_bytes;
    stats_.device_name += (stats_.device_name.empty() ? "" : " + ") + ls.device_name;
    stages_.push_back(std::move(st));
  }

  std::string_view name() const override { return "cuda"; }
  const model_desc& model() const override { return desc_; }
  const cuda_load_stats& load_stats() const override { return stats_; }
  uint64_t weight_bytes_per_token() const override {
    uint64_t n = 0;
    for (const auto& st : stages_) n += st->weight_bytes_per_token();
    return n;
  }
  uint64_t graph_replays() const override {
    uint64_t n = 0;
    for (const auto& st : stages_) n += st->graph_replays();
    return n;
  }

  result<std::unique_ptr<kv_cache>> make_cache(const kv_cache_config& cfg) override {
    auto c = normalize_kv_config(cfg);
    if (!c) return c.err();
    auto cache = std::make_unique<cuda_stage_cache>(*c, this);
    for (const auto& st : stages_) {
      auto part = st->make_cache(*c);
      if (!part) return part.err();
      cache->parts.push_back(std::move(*part));
    }
    return std::unique_ptr<kv_cache>(std::move(cache));
  }

  status forward(const batch& b, kv_cache& cache, std::vector<float>& logits) override {
    TANDEM_TRY(run(b, cache, false));
    return stages_.back()->copy_out(&logits, nullptr);
  }
  status forward_argmax(const batch& b, kv_cache& cache, std::vector<int32_t>& ids) override {
    TANDEM_TRY(run(b, cache, true));
    return stages_.back()->copy_out(nullptr, &ids);
  }

 private:
  status run(const batch& b, kv_cache& cache_base, bool argmax) {
    auto* cache = dynamic_cast<cuda_stage_cache*>(&cache_base);
    if (!cache || cache->owner() != this) return make_error("the KV cache was not made by this CUDA backend");
    if (b.size() > static_cast<size_t>(k_cuda_max_batch))
      return make_error("batch of ", b.size(), " tokens exceeds the CUDA backend's limit of ", k_cuda_max_batch);
    TANDEM_TRY(reserve_batch(b, *cache, desc_.hp.n_vocab));
    for (size_t i = 0; i < stages_.size(); ++i) {
      cuda_stage::input in;
      if (i > 0) in = {stages_[i - 1]->hidden(), stages_[i - 1]->device(), stages_[i - 1]->done()};
      TANDEM_TRY(stages_[i]->run_stage(b, *cache, *cache->parts[i], in, argmax && i + 1 == stages_.size()));
    }
    return {};
  }

  model_desc desc_;
  std::vector<std::unique_ptr<cuda_stage>> stages_;
  cuda_load_stats stats_;
};

}  // namespace

std::unique_ptr<cuda_backend_api> make_cuda_split_backend(const model_desc& desc,
                                                          std::vector<std::unique_ptr<cuda_stage>> stages) {
  auto split = std::make_unique<cuda_split_backend>(desc);
  for (auto& st : stages) split->add_stage(std::move(st));
  return split;
}

}  // namespace tandem
