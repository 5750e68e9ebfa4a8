// The tensor split: every layer cut across several GPUs by KV-head groups and FFN columns, each
// device a cuda_stage holding its share, the partial outputs summed with NCCL all-reduces. One
// thread drives each device, since NCCL needs every rank's call to be in flight at once.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "backend/cuda/cuda_stage.h"
#include "kernels/cuda_check.h"

namespace tandem {
namespace {

// Worker threads that each run job(i) for their index i >= 1 while the caller runs job(0).
class rank_threads {
 public:
  explicit rank_threads(size_t n) : results_(n) {
    for (size_t i = 1; i < n; ++i) threads_.emplace_back([this, i] { loop(i); });
  }
  ~rank_threads() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Returns the first error in rank order.
  status run_all(const std::function<status(size_t)>& job) {
    {
      std::lock_guard lock(mu_);
      job_ = &job;
      pending_ = threads_.size();
      ++generation_;
    }
    wake_.notify_all();
    results_[0] = job(0);
    std::unique_lock lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
    for (auto& r : results_)
      if (!r) return std::move(r);
    return {};
  }

 private:
  void loop(size_t i) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<status(size_t)>* job = nullptr;
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      status r = (*job)(i);
      std::lock_guard lock(mu_);
      results_[i] = std::move(r);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  std::vector<status> results_;
  const std::function<status(size_t)>* job_ = nullptr;
  size_t pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

class cuda_tensor_backend final : public cuda_backend_api {
 public:
  cuda_tensor_backend(const model_desc& desc, std::vector<std::unique_ptr<cuda_stage>> stages,
                      std::vector<std::unique_ptr<cuda_collective>> comms, int lead)
      : desc_(desc), stages_(std::move(stages)), comms_(std::move(comms)), lead_(lead), threads_(stages_.size()) {
    for (const auto& st : stages_) {
      const auto& ls = st->load_stats();
      stats_.bytes += ls.bytes;
      stats_.seconds = std::max(stats_.seconds, ls.seconds);
      stats_.device_bytes += ls.device_bytes;
      stats_.device_name += (stats_.device_name.empty() ? "" : " + ") + ls.device_name;
    }
  }
  ~cuda_tensor_backend() override {
    // Stages first: their streams may still hold collectives on the communicators.
    for (const auto& st : stages_) TANDEM_CUDA_LOG(cudaStreamSynchronize(st->stream()));
    stages_.clear();
    comms_.clear();
  }

  std::string_view name() const override { return "cuda"; }
  const model_desc& model() const override { return desc_; }
  const cuda_load_stats& load_stats() const override { return stats_; }
  // Summed over the devices, which read their shares at the same time.
  uint64_t weight_bytes_per_token() const override {
    uint64_t n = 0;
    for (const auto& st : stages_) n += st->weight_bytes_per_token();
    return n;
  }
  uint64_t graph_replays() const override { return stages_[size_t(lead_)]->graph_replays(); }

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
    return stages_[size_t(lead_)]->copy_out(&logits, nullptr);
  }
  status forward_argmax(const batch& b, kv_cache& cache, std::vector<int32_t>& ids) override {
    TANDEM_TRY(run(b, cache, true));
    return stages_[size_t(lead_)]->copy_out(nullptr, &ids);
  }

 private:
  status run(const batch& b, kv_cache& cache_base, bool argmax) {
    auto* cache = dynamic_cast<cuda_stage_cache*>(&cache_base);
    if (!cache || cache->owner() != this) return make_error("the KV cache was not made by this CUDA backend");
    if (b.size() > static_cast<size_t>(k_cuda_max_batch))
      return make_error("batch of ", b.size(), " tokens exceeds the CUDA backend's limit of ", k_cuda_max_batch);
    TANDEM_TRY(reserve_batch(b, *cache, desc_.hp.n_vocab));
    // Every allocation happens here, before any device enters a collective its peers might
    // never reach.
    for (const auto& st : stages_) TANDEM_TRY(st->prepare_stage(b, *cache));
    return threads_.run_all([&](size_t i) -> status {
      const bool lead = int(i) == lead_;
      TANDEM_TRY(stages_[i]->launch_stage(*cache->parts[i], argmax && lead));
      // The lead's copy_out waits for its stream; the others finish theirs here, so the next
      // step's prepare never refills buffers a running step still reads.
      if (!lead) TANDEM_CUDA_TRY(cudaStreamSynchronize(stages_[i]->stream()));
      return {};
    });
  }

  model_desc desc_;
  std::vector<std::unique_ptr<cuda_stage>> stages_;
  std::vector<std::unique_ptr<cuda_collective>> comms_;
  int lead_ = 0;
  rank_threads threads_;
  cuda_load_stats stats_;
};

}  // namespace

std::unique_ptr<cuda_backend_api> make_cuda_tensor_backend(const model_desc& desc,
                                                           std::vector<std::unique_ptr<cuda_stage>> stages,
                                                           std::vector<std::unique_ptr<cuda_collective>> comms,
                                                           int lead) {
  return std::make_unique<cuda_tensor_backend>(desc, std::move(stages), std::move(comms), lead);
}

}  // namespace tandem
