// model_worker: one loaded model with its worker threads (one per sequence slot the model
// batches) and a bounded FIFO job queue. The engine only ever runs here, never on the I/O thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "registry/model_job.h"
#include "registry/served_model.h"

namespace tandem::daemon {

class model_worker {
 public:
  using clock = std::chrono::steady_clock;
  enum class push_result { ok, full, closed };

  model_worker(std::unique_ptr<served_model> model, std::size_t max_queue);
  ~model_worker();
  model_worker(const model_worker&) = delete;
  model_worker& operator=(const model_worker&) = delete;

  // Queues a job unless the queue is full or the instance no longer accepts work.
  push_result push(model_job job);
  // Takes jobs another instance had accepted (hot swap): the cap does not apply to them.
  void adopt(std::deque<model_job> jobs);
  // Stops accepting; returns the jobs that had not started, for a swap to hand over.
  std::deque<model_job> close_and_take_queued();
  // Stops accepting; queued jobs still run (unload drains).
  void close();
  // Waits until the worker has finished every job; call after close.
  void join();

  std::size_t queued() const;
  bool running() const;  // some job is running
  bool idle_for(clock::duration d, clock::time_point now) const;
  // No job running or waiting: the instance may be evicted without failing anyone.
  bool idle() const;
  clock::time_point last_used() const;
  // What the memory budget counts: mapped weights plus KV cache.
  std::uint64_t bytes() const { return info_.file_bytes + info_.cache_bytes; }
  const model_info& info() const { return info_; }
  // How the load went; set once, before the worker is shared with other threads.
  void set_load(const load_record& r) { info_.load = r; }
  served_model& model() { return *model_; }
  const served_model& model() const { return *model_; }
  std::uint64_t completed() const;

 private:
  void work();

  std::unique_ptr<served_model> model_;
  model_info info_;
  std::size_t max_queue_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<model_job> queue_;
  bool closed_ = false;
  unsigned running_ = 0;
  std::uint64_t completed_ = 0;
  clock::time_point last_used_ = clock::now();
  std::vector<std::thread> workers_;
};

}  // namespace tandem::daemon
