// Registry swap logic with a test double for the model: repointing, in-flight requests finishing on
// their model, failed loads leaving the old model serving, busy queues, unload and idle unload.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "registry/model_registry.h"

namespace tandem::daemon {
namespace {

using namespace std::chrono_literals;

// Emits its path as text, one chunk per `step`, `chunks` times; stops when the sink says so.
class fake_model final : public served_model {
 public:
  fake_model(std::string path, int chunks, std::chrono::milliseconds step)
      : path_(std::move(path)), chunks_(chunks), step_(step) {}
  result<generation_stats> generate(const generation_input&, const text_sink& on_text) override {
    generation_stats s;
    s.finish_reason = "length";
    for (int i = 0; i < chunks_; ++i) {
      std::this_thread::sleep_for(step_);
      ++s.generated_tokens;
      if (!on_text(path_)) {
        s.finish_reason = "cancelled";
        break;
      }
    }
    return s;
  }
  result<std::vector<std::int32_t>> tokenize(std::string_view t, bool) const override {
    return std::vector<std::int32_t>(t.size(), 1);
  }
  result<std::string> detokenize(std::span<const std::int32_t>) const override { return path_; }
  model_info info() const override { return {path_, "fake", "none", 1, 1, 0, 0}; }

 private:
  std::string path_;
  int chunks_;
  std::chrono::milliseconds step_;
};

model_loader fake_loader(int chunks, std::chrono::milliseconds step, std::chrono::milliseconds load_time = 0ms) {
  return [=](const std::string& path) -> result<std::unique_ptr<served_model>> {
    std::this_thread::sleep_for(load_time);
    if (path.find("corrupt") != std::string::npos) return make_error(path, ": not a GGUF file");
    return std::unique_ptr<served_model>(std::make_unique<fake_model>(path, chunks, step));
  };
}

admin_executor thread_executor() {
  return [](std::function<void()> f) { std::thread(std::move(f)).detach(); };
}

// A job that records the text it got (its model's path) and signals when done.
struct probe {
  std::promise<std::string> done;
  std::atomic<bool> failed{false};
  model_job job() {
    model_job j;
    j.run = [this](served_model& m) {
      std::string seen;
      (void)m.generate({}, [&](std::string_view t) {
        seen = t;
        return !j_cancelled->load();
      });
      done.set_value(seen);
    };
    j.fail = [this](const proto::wire_error& e) {
      failed = true;
      done.set_value("failed:" + e.message);
    };
    j_cancelled = j.cancelled;
    return j;
  }
  std::shared_ptr<std::atomic<bool>> j_cancelled;
};

TEST(registry, load_submit_and_default_alias) {
  model_registry reg(fake_loader(2, 1ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a", std::nullopt, info));
  EXPECT_EQ(info.path, "/m/a");
  EXPECT_EQ(reg.default_alias(), "a");
  probe p;
  ASSERT_FALSE(reg.submit("", p.job()));
  EXPECT_EQ(p.done.get_future().get(), "/m/a");
  auto err = reg.load("a", "/m/b", std::nullopt, info);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, proto::error_code::exists);
  auto nf = reg.submit("zzz", probe().job());
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->code, proto::error_code::not_found);
}

TEST(registry, failed_load_is_forgotten_and_reports_load_failed) {
  model_registry reg(fake_loader(1, 1ms), {}, thread_executor());
  model_info info;
  auto err = reg.load("a", "/m/corrupt", std::nullopt, info);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, proto::error_code::load_failed);
  EXPECT_NE(err->message.find("not a GGUF"), std::string::npos);
  EXPECT_EQ(reg.size(), 0u);
  EXPECT_EQ(reg.default_alias(), "");
}

TEST(registry, swap_finishes_in_flight_on_old_and_moves_queued_to_new) {
  registry_options opt;
  opt.max_queue = 8;
  model_registry reg(fake_loader(20, 5ms), opt, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/old", std::nullopt, info));
  probe running, queued;
  ASSERT_FALSE(reg.submit("a", running.job()));
  std::this_thread::sleep_for(20ms);  // the first job is now running on the old model
  ASSERT_FALSE(reg.submit("a", queued.job()));
  ASSERT_FALSE(reg.swap("a", "/m/new", info));
  EXPECT_EQ(info.path, "/m/new");
  EXPECT_EQ(running.done.get_future().get(), "/m/old");
  EXPECT_EQ(queued.done.get_future().get(), "/m/new");
  probe after;
  ASSERT_FALSE(reg.submit("a", after.job()));
  EXPECT_EQ(after.done.get_future().get(), "/m/new");
}

TEST(registry, failed_swap_leaves_the_old_model_serving) {
  model_registry reg(fake_loader(1, 1ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/old", std::nullopt, info));
  auto err = reg.swap("a", "/m/corrupt", info);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, proto::error_code::load_failed);
  probe p;
  ASSERT_FALSE(reg.submit("a", p.job()));
  EXPECT_EQ(p.done.get_future().get(), "/m/old");
  EXPECT_EQ(reg.describe()[0]["path"], "/m/old");
}

TEST(registry, requests_during_a_slow_swap_are_served_by_the_old_model) {
  model_registry reg(fake_loader(1, 1ms, 200ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/old", std::nullopt, info));
  auto swapped = std::async(std::launch::async, [&] {
    model_info i;
    return reg.swap("a", "/m/new", i);
  });
  std::this_thread::sleep_for(50ms);
  probe p;
  ASSERT_FALSE(reg.submit("a", p.job()));
  EXPECT_EQ(p.done.get_future().get(), "/m/old");
  auto second = reg.swap("a", "/m/other", info);  // one swap at a time per alias
  ASSERT_TRUE(second);
  EXPECT_EQ(second->code, proto::error_code::busy);
  EXPECT_FALSE(swapped.get());
}

TEST(registry, full_queue_is_busy) {
  registry_options opt;
  opt.max_queue = 2;
  model_registry reg(fake_loader(10, 10ms), opt, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a", std::nullopt, info));
  std::vector<std::unique_ptr<probe>> ps;
  int busy = 0;
  for (int i = 0; i < 6; ++i) {
    ps.push_back(std::make_unique<probe>());
    if (auto e = reg.submit("a", ps.back()->job())) {
      EXPECT_EQ(e->code, proto::error_code::busy);
      ++busy;
    }
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_GE(busy, 3);  // one running, at most two waiting
  for (auto& p : ps) p->j_cancelled->store(true);
  reg.close_all();
  reg.join_all();
}

TEST(registry, unload_drains_accepted_jobs) {
  model_registry reg(fake_loader(5, 5ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a", std::nullopt, info));
  probe p;
  ASSERT_FALSE(reg.submit("a", p.job()));
  ASSERT_FALSE(reg.unload("a"));
  EXPECT_EQ(p.done.get_future().get(), "/m/a");
  EXPECT_TRUE(reg.submit("a", probe().job()));
  EXPECT_EQ(reg.size(), 0u);
}

TEST(registry, idle_unload_then_lazy_reload) {
  model_registry reg(fake_loader(1, 1ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a", 0.05, info));
  std::this_thread::sleep_for(100ms);
  reg.sweep();
  EXPECT_EQ(reg.describe()[0]["state"], "unloaded");
  probe p;
  ASSERT_FALSE(reg.submit("a", p.job()));  // parks and reloads
  EXPECT_EQ(p.done.get_future().get(), "/m/a");
  EXPECT_EQ(reg.describe()[0]["state"], "resident");
}

TEST(registry, close_all_fails_parked_jobs) {
  model_registry reg(fake_loader(1, 1ms, 300ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a", 0.01, info));
  std::this_thread::sleep_for(30ms);
  reg.sweep();
  probe p;
  ASSERT_FALSE(reg.submit("a", p.job()));  // parked while reloading
  reg.close_all();
  EXPECT_EQ(p.done.get_future().get().rfind("failed:", 0), 0u);
  std::this_thread::sleep_for(400ms);  // let the detached reload finish before the registry dies
}

}  // namespace
}  // namespace tandem::daemon
