// model_worker: the worker loop and its queue.
#include "registry/model_worker.h"

#include <algorithm>

namespace tandem::daemon {

model_worker::model_worker(std::unique_ptr<served_model> model, std::size_t max_queue)
    : model_(std::move(model)), info_(model_->info()), max_queue_(max_queue) {
  const unsigned n = std::max(1u, model_->slots());
  for (unsigned i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
}

model_worker::~model_worker() {
  close();
  join();
}

model_worker::push_result model_worker::push(model_job job) {
  {
    std::lock_guard lk(mu_);
    if (closed_) return push_result::closed;
    if (queue_.size() >= max_queue_) return push_result::full;
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return push_result::ok;
}

void model_worker::adopt(std::deque<model_job> jobs) {
  {
    std::lock_guard lk(mu_);
    for (auto& j : jobs) queue_.push_back(std::move(j));
  }
  cv_.notify_all();
}

std::deque<model_job> model_worker::close_and_take_queued() {
  std::deque<model_job> out;
  {
    std::lock_guard lk(mu_);
    closed_ = true;
    out.swap(queue_);
  }
  cv_.notify_all();
  return out;
}

void model_worker::close() {
  {
    std::lock_guard lk(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

void model_worker::join() {
  for (auto& w : workers_)
    if (w.joinable() && w.get_id() != std::this_thread::get_id()) w.join();
}

std::size_t model_worker::queued() const {
  std::lock_guard lk(mu_);
  return queue_.size();
}

bool model_worker::running() const {
  std::lock_guard lk(mu_);
  return running_ > 0;
}

std::uint64_t model_worker::completed() const {
  std::lock_guard lk(mu_);
  return completed_;
}

bool model_worker::idle_for(clock::duration d, clock::time_point now) const {
  std::lock_guard lk(mu_);
  return running_ == 0 && queue_.empty() && now - last_used_ >= d;
}

bool model_worker::idle() const {
  std::lock_guard lk(mu_);
  return running_ == 0 && queue_.empty();
}

model_worker::clock::time_point model_worker::last_used() const {
  std::lock_guard lk(mu_);
  return last_used_;
}

void model_worker::work() {
  for (;;) {
    model_job job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return closed_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closed and drained
      job = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    // run() itself answers a job cancelled while queued; an exception must not kill the worker.
    try {
      if (job.run) job.run(*model_);
    } catch (const std::exception& e) {
      if (job.fail) job.fail({proto::error_code::internal, std::string("worker: ") + e.what()});
    }
    std::lock_guard lk(mu_);
    --running_;
    ++completed_;
    last_used_ = clock::now();
  }
}

}  // namespace tandem::daemon
