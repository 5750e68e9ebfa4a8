// A small fixed thread pool for data-parallel loops: the CPU backend splits mat-vecs over output
// rows and attention over (token, head) pairs. The calling thread works too.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem {

class thread_pool {
 public:
  explicit thread_pool(unsigned n_threads = 0);  // 0: std::thread::hardware_concurrency()
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks of at most `grain` items covering [0, n), spread over
  // all threads, and returns when every chunk is done. Not reentrant.
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  uint64_t generation_ = 0;
  unsigned busy_ = 0;
  bool stop_ = false;
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0, grain_ = 1;
  std::atomic<size_t> next_{0};
};

}  // namespace tandem
