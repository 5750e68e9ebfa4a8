// forward_watch: notes when the engine enters and leaves a forward pass, so that a pass that
// takes longer than a stated limit (a wedged GPU, a hung kernel) makes the model unhealthy and
// tandemd withholds its systemd watchdog ping. An idle engine is healthy.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "backend/backend.h"

namespace tandem {

class forward_watch {
 public:
  using clock = std::chrono::steady_clock;
  // limit <= 0: never unhealthy.
  explicit forward_watch(std::chrono::duration<double> limit)
      : limit_(std::chrono::duration_cast<clock::duration>(limit)) {}

  void enter() { since_.store(clock::now().time_since_epoch().count() | 1, std::memory_order_release); }
  void leave() { since_.store(0, std::memory_order_release); }
  // Thread safe: read by the watchdog tick while the worker thread runs a pass.
  bool healthy(clock::time_point now = clock::now()) const {
    const auto since = since_.load(std::memory_order_acquire);
    if (since == 0 || limit_ <= clock::duration::zero()) return true;
    return now - clock::time_point(clock::duration(since)) <= limit_;
  }

 private:
  clock::duration limit_;
  // Start of the pass in progress (steady clock ticks, low bit set so it is never 0); 0: idle.
  std::atomic<clock::rep> since_{0};
};

// A backend that passes everything to another and reports its forward passes to a watch.
class watched_backend final : public backend {
 public:
  watched_backend(backend& inner, forward_watch& watch) : inner_(inner), watch_(watch) {}
  std::string_view name() const override { return inner_.name(); }
  const model_desc& model() const override { return inner_.model(); }
  result<std::unique_ptr<kv_cache>> make_cache(const kv_cache_config& cfg) override { return inner_.make_cache(cfg); }
  status forward(const batch& b, kv_cache& cache, std::vector<float>& logits) override {
    return watched([&] { return inner_.forward(b, cache, logits); });
  }
  // Passed on too, or the scheduler's greedy passes would fall back to the host default.
  status forward_argmax(const batch& b, kv_cache& cache, std::vector<int32_t>& ids) override {
    return watched([&] { return inner_.forward_argmax(b, cache, ids); });
  }

 private:
  template <class F>
  status watched(F pass) {
    struct scope {
      forward_watch& w;
      ~scope() { w.leave(); }
    } s{watch_};
    watch_.enter();
    return pass();
  }

  backend& inner_;
  forward_watch& watch_;
};

}  // namespace tandem
