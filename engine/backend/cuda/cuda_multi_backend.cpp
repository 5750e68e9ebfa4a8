// The shared part of the layer and tensor splits (see cuda_multi_backend.h).
#include "backend/cuda/cuda_multi_backend.h"

#include <algorithm>
#include <string>

namespace tandem {

cuda_multi_backend::cuda_multi_backend(const model_desc& desc, std::vector<std::unique_ptr<cuda_stage>> stages,
                                       size_t output)
    : desc_(desc), stages_(std::move(stages)), output_(output) {
  for (const auto& st : stages_) {
    const auto& ls = st->load_stats();
    stats_.bytes += ls.bytes;
    stats_.seconds += ls.seconds;
    stats_.device_bytes += ls.device_bytes;
    stats_.device_name += (stats_.device_name.empty() ? "" : " + ") + ls.device_name;
  }
}

uint64_t cuda_multi_backend::weight_bytes_per_token() const {
  uint64_t n = 0;
  for (const auto& st : stages_) n += st->weight_bytes_per_token();
  return n;
}

result<std::unique_ptr<kv_cache>> cuda_multi_backend::make_cache(const kv_cache_config& cfg) {
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

status cuda_multi_backend::forward(const batch& b, kv_cache& cache, std::vector<float>& logits) {
  TANDEM_TRY(run(b, cache, false));
  return stages_[output_]->copy_out(&logits, nullptr);
}

status cuda_multi_backend::forward_argmax(const batch& b, kv_cache& cache, std::vector<int32_t>& ids) {
  TANDEM_TRY(run(b, cache, true));
  return stages_[output_]->copy_out(nullptr, &ids);
}

status cuda_multi_backend::run(const batch& b, kv_cache& cache_base, bool argmax) {
  auto* cache = dynamic_cast<cuda_stage_cache*>(&cache_base);
  if (!cache || cache->owner() != this) return make_error("the KV cache was not made by this CUDA backend");
  if (b.size() > static_cast<size_t>(k_cuda_max_batch))
    return make_error("batch of ", b.size(), " tokens exceeds the CUDA backend's limit of ", k_cuda_max_batch);
  TANDEM_TRY(reserve_batch(b, *cache, desc_.hp.n_vocab));
  return run_stages(b, *cache, argmax);
}

}  // namespace tandem
