// The tensor split: every layer cut across several GPUs by KV-head groups and FFN columns, each
// device a cuda_stage holding its share, the partial outputs summed with NCCL all-reduces. One
// thread drives each device, since NCCL needs every rank's call to be in flight at once.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "backend/cuda/cuda_multi_backend.h"
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

// Every stage holds every layer's share; the lead (stage `output_`) also holds the embeddings
// and the output head.
class cuda_tensor_backend final : public cuda_multi_backend {
 public:
  cuda_tensor_backend(const model_desc& desc, std::vector<std::unique_ptr<cuda_stage>> stages,
                      std::vector<std::unique_ptr<cuda_collective>> comms, int lead)
      : cuda_multi_backend(desc, std::move(stages), size_t(lead)), comms_(std::move(comms)), threads_(stages_.size()) {}
  ~cuda_tensor_backend() override {
    // Stages first: their streams may still hold collectives on the communicators.
    for (const auto& st : stages_) TANDEM_CUDA_LOG(cudaStreamSynchronize(st->stream()));
    stages_.clear();
    comms_.clear();
  }

 private:
  status run_stages(const batch& b, cuda_stage_cache& cache, bool argmax) override {
    // Every allocation happens here, before any device enters a collective its peers might
    // never reach.
    for (const auto& st : stages_) TANDEM_TRY(st->prepare_stage(b, cache));
    return threads_.run_all([&](size_t i) -> status {
      const bool lead = i == output_;
      TANDEM_TRY(stages_[i]->launch_stage(*cache.parts[i], argmax && lead));
      // The lead's copy_out waits for its stream; the others finish theirs here, so the next
      // step's prepare never refills buffers a running step still reads.
      if (!lead) TANDEM_CUDA_TRY(cudaStreamSynchronize(stages_[i]->stream()));
      return {};
    });
  }

  std::vector<std::unique_ptr<cuda_collective>> comms_;
  rank_threads threads_;
};

}  // namespace

std::unique_ptr<cuda_backend_api> make_cuda_tensor_backend(const model_desc& desc,
                                                           std::vector<std::unique_ptr<cuda_stage>> stages,
                                                           std::vector<std::unique_ptr<cuda_collective>> comms,
                                                           int lead) {
  return std::make_unique<cuda_tensor_backend>(desc, std::move(stages), std::move(comms), lead);
}

}  // namespace tandem
