// The stall watch (engine health for the watchdog): a forward pass stuck past the stall limit makes the model
// unhealthy, an idle or briefly busy engine is healthy (a backend that blocks stands in for a
// wedged GPU).
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "model/model_desc.h"
#include "runtime/forward_watch.h"

namespace tandem {
namespace {

using namespace std::chrono_literals;

// forward() blocks until released, like a kernel that never finishes.
class stalled_backend final : public backend {
 public:
  std::string_view name() const override { return "stalled"; }
  const model_desc& model() const override { return desc_; }
  result<std::unique_ptr<kv_cache>> make_cache(const kv_cache_config&) override {
    return make_error("stalled backend has no cache");
  }
  status forward(const batch&, kv_cache&, std::vector<float>&) override {
    entered.set_value();
    release.get_future().wait();
    return make_error("released");
  }
  std::promise<void> entered;
  std::promise<void> release;

 private:
  model_desc desc_;
};

// A cache the forward never touches; the stalled backend only needs something to be handed.
class null_cache final : public kv_cache {
 public:
  null_cache() : kv_cache(kv_cache_config{}) {}
  std::uint64_t bytes() const override { return 0; }
};

TEST(engine_health, stalled_forward_turns_unhealthy_and_recovers) {
  forward_watch watch(std::chrono::duration<double>(0.05));
  stalled_backend inner;
  watched_backend be(inner, watch);
  null_cache cache;
  EXPECT_TRUE(watch.healthy());  // idle
  auto pass = std::async(std::launch::async, [&] {
    std::vector<float> logits;
    return be.forward(batch{}, cache, logits);
  });
  inner.entered.get_future().wait();
  EXPECT_TRUE(watch.healthy());  // busy, but within the limit
  std::this_thread::sleep_for(120ms);
  EXPECT_FALSE(watch.healthy());  // one pass for longer than the limit: wedged
  inner.release.set_value();
  EXPECT_FALSE(pass.get().ok());  // the backend's result comes through unchanged
  EXPECT_TRUE(watch.healthy());   // the pass ended (with an error): healthy again
}

TEST(engine_health, time_is_measured_from_the_start_of_the_pass) {
  forward_watch watch(std::chrono::duration<double>(10.0));
  const auto t0 = forward_watch::clock::now();
  watch.enter();
  EXPECT_TRUE(watch.healthy(t0 + 9s));
  EXPECT_FALSE(watch.healthy(t0 + 11s));
  watch.leave();
  EXPECT_TRUE(watch.healthy(t0 + 11s));
}

TEST(engine_health, zero_limit_never_reports_a_stall) {
  forward_watch watch(std::chrono::duration<double>(0));
  watch.enter();
  EXPECT_TRUE(watch.healthy(forward_watch::clock::now() + 1h));
}

}  // namespace
}  // namespace tandem
