// Thread pool: workers sleep on a condition variable and take chunks from an atomic counter.
#include "backend/cpu/thread_pool.h"

#include <algorithm>

namespace tandem {

thread_pool::thread_pool(unsigned n_threads) {
  if (n_threads == 0) n_threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < n_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void thread_pool::run_chunks() {
  for (;;) {
    size_t begin = next_.fetch_add(grain_);
    if (begin >= n_) return;
    (*fn_)(begin, std::min(n_, begin + grain_));
  }
}

void thread_pool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();
    {
      std::lock_guard lock(mu_);
      if (--busy_ == 0) done_cv_.notify_one();
    }
  }
}

void thread_pool::parallel_for(size_t n, size_t grain,
                               const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  // Too little work to be worth waking anyone.
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lock(mu_);
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    next_.store(0);
    busy_ = static_cast<unsigned>(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  run_chunks();
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return busy_ == 0; });
  fn_ = nullptr;
}

}  // namespace tandem
