// Registry swap logic with a test double for the model: repointing, in-flight requests finishing on
// their model, failed loads leaving the old model serving, busy queues, unload and idle unload.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "registry/model_registry.h"

namespace tandem::daemon {
namespace {

using namespace std::chrono_literals;

// "/m/a@300" is a model of 300 bytes; paths without '@' have none.
std::uint64_t size_of(const std::string& path) {
  const auto at = path.rfind('@');
  return at == std::string::npos ? 0 : std::stoull(path.substr(at + 1));
}

// Bytes of fake models alive right now, and the most ever alive together.
std::atomic<std::uint64_t> g_live{0};
std::atomic<std::uint64_t> g_peak{0};

// Emits its path as text, one chunk per `step`, `chunks` times; stops when the sink says so.
class fake_model final : public served_model {
 public:
  fake_model(std::string path, int chunks, std::chrono::milliseconds step)
      : path_(std::move(path)), chunks_(chunks), step_(step), bytes_(size_of(path_)) {
    const auto now = g_live += bytes_;
    for (auto p = g_peak.load(); now > p && !g_peak.compare_exchange_weak(p, now);) {
    }
  }
  ~fake_model() override { g_live -= bytes_; }
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
  // "wedged" models stand for an engine stuck in a forward pass.
  bool healthy() const override { return path_.find("wedged") == std::string::npos; }
  model_info info() const override {
    model_info i;
    i.path = path_;
    i.arch = "fake";
    i.backend = "none";
    i.device = "cpu";
    i.file_bytes = bytes_;
    // "hybrid" models stand for one whose cache holds recurrent state besides its KV.
    if (path_.find("hybrid") != std::string::npos) i.cache_bytes = 96, i.state_bytes = 64;
    return i;
  }

 private:
  std::string path_;
  int chunks_;
  std::chrono::milliseconds step_;
  std::uint64_t bytes_;
};

// The weight bytes a fake load reports: its size, or 4000 for a path without one.
std::uint64_t weight_bytes(const std::string& path) { return size_of(path) ? size_of(path) : 4000; }

// "corrupt" fails at once (also for the sizer); "late-fail" passes the sizer and fails to load.
// The load reports its weight bytes to `progress` in four equal parts spread over `load_time`, as
// the CUDA backend's uploads do.
model_loader fake_loader(int chunks, std::chrono::milliseconds step, std::chrono::milliseconds load_time = 0ms) {
  return [=](const std::string&, const std::string& path, const proto::model_settings&,
             load_progress* progress) -> result<std::unique_ptr<served_model>> {
    const std::uint64_t total = weight_bytes(path);
    if (progress) progress->start(total);
    for (int part = 0; part < 4; ++part) {
      std::this_thread::sleep_for(load_time * (part + 1) / 4 - load_time * part / 4);
      if (progress) progress->add(part < 3 ? total / 4 : total - 3 * (total / 4));
    }
    if (path.find("corrupt") != std::string::npos) return make_error(path, ": not a GGUF file");
    if (path.find("late-fail") != std::string::npos) return make_error(path, ": tensor data is truncated");
    return std::unique_ptr<served_model>(std::make_unique<fake_model>(path, chunks, step));
  };
}

model_sizer fake_sizer() {
  return [](const std::string&, const std::string& path, const proto::model_settings&) -> result<std::uint64_t> {
    if (path.find("corrupt") != std::string::npos) return make_error(path, ": not a GGUF file");
    return size_of(path);
  };
}

proto::model_settings keep(double seconds) {
  proto::model_settings s;
  s.keep_alive_s = seconds;
  return s;
}

registry_options budget(std::uint64_t bytes, std::size_t max_queue = 16) {
  registry_options o;
  o.max_queue = max_queue;
  o.memory_budget = bytes;
  o.sizer = fake_sizer();
  return o;
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

// Loads and swaps tell the loader which alias they are for (per-model device options).
TEST(registry, loader_sees_the_alias) {
  std::mutex mu;
  std::vector<std::string> seen;
  auto base = fake_loader(1, 1ms);
  model_loader loader = [&](const std::string& alias, const std::string& path, const proto::model_settings& s,
                            load_progress* progress) {
    std::lock_guard lk(mu);
    seen.push_back(alias + ":" + path);
    return base(alias, path, s, progress);
  };
  model_registry reg(loader, {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("big", "/m/a", {}, info));
  ASSERT_FALSE(reg.swap("big", "/m/b", {}, info));
  std::lock_guard lk(mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"big:/m/a", "big:/m/b"}));
}

// The loader gets the alias's table under the request's own settings; a reload after idle
// unload gets the same again, and a swap the table under its own (not the earlier load's).
TEST(registry, settings_are_table_under_request) {
  std::mutex mu;
  std::vector<std::string> seen;
  auto base = fake_loader(1, 1ms);
  model_loader loader = [&](const std::string& alias, const std::string& path, const proto::model_settings& s,
                            load_progress* progress) {
    std::lock_guard lk(mu);
    seen.push_back(alias + " ctx " + std::to_string(s.context.value_or(0)) + " kv " + s.kv_type.value_or("-"));
    return base(alias, path, s, progress);
  };
  registry_options opt;
  proto::model_settings table;
  table.context = 256;
  table.kv_type = "q8_0";
  table.keep_alive_s = 0.01;
  opt.tables["big"] = table;
  model_registry reg(loader, opt, thread_executor());
  model_info info;
  proto::model_settings request;
  request.context = 1024;
  ASSERT_FALSE(reg.load("big", "/m/a", request, info));
  ASSERT_FALSE(reg.load("small", "/m/b", request, info));
  EXPECT_EQ(reg.describe()[0]["keep_alive"], 0.01);  // the table's keep-alive
  std::this_thread::sleep_for(30ms);
  reg.sweep();  // idle past the table's keep-alive: unloaded, reloaded by the next job
  probe p;
  ASSERT_FALSE(reg.submit("big", p.job()));
  p.done.get_future().get();
  ASSERT_FALSE(reg.swap("big", "/m/c", {}, info));
  std::lock_guard lk(mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"big ctx 1024 kv q8_0", "small ctx 1024 kv -", "big ctx 1024 kv q8_0",
                                            "big ctx 256 kv q8_0"}));
}

TEST(registry, load_submit_and_default_alias) {
  model_registry reg(fake_loader(2, 1ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a", {}, info));
  EXPECT_EQ(info.path, "/m/a");
  EXPECT_EQ(reg.default_alias(), "a");
  probe p;
  ASSERT_FALSE(reg.submit("", p.job()));
  EXPECT_EQ(p.done.get_future().get(), "/m/a");
  auto err = reg.load("a", "/m/b", {}, info);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, proto::error_code::exists);
  auto nf = reg.submit("zzz", probe().job());
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->code, proto::error_code::not_found);
}

TEST(registry, failed_load_is_forgotten_and_reports_load_failed) {
  model_registry reg(fake_loader(1, 1ms), {}, thread_executor());
  model_info info;
  auto err = reg.load("a", "/m/corrupt", {}, info);
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
  ASSERT_FALSE(reg.load("a", "/m/old", {}, info));
  probe running, queued;
  ASSERT_FALSE(reg.submit("a", running.job()));
  std::this_thread::sleep_for(20ms);  // the first job is now running on the old model
  ASSERT_FALSE(reg.submit("a", queued.job()));
  ASSERT_FALSE(reg.swap("a", "/m/new", {}, info));
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
  ASSERT_FALSE(reg.load("a", "/m/old", {}, info));
  auto err = reg.swap("a", "/m/corrupt", {}, info);
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
  ASSERT_FALSE(reg.load("a", "/m/old", {}, info));
  auto swapped = std::async(std::launch::async, [&] {
    model_info i;
    return reg.swap("a", "/m/new", {}, i);
  });
  std::this_thread::sleep_for(50ms);
  probe p;
  ASSERT_FALSE(reg.submit("a", p.job()));
  EXPECT_EQ(p.done.get_future().get(), "/m/old");
  auto second = reg.swap("a", "/m/other", {}, info);  // one swap at a time per alias
  ASSERT_TRUE(second);
  EXPECT_EQ(second->code, proto::error_code::busy);
  EXPECT_FALSE(swapped.get());
}

TEST(registry, full_queue_is_busy) {
  registry_options opt;
  opt.max_queue = 2;
  model_registry reg(fake_loader(10, 10ms), opt, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a", {}, info));
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
  ASSERT_FALSE(reg.load("a", "/m/a", {}, info));
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
  ASSERT_FALSE(reg.load("a", "/m/a", keep(0.05), info));
  std::this_thread::sleep_for(100ms);
  reg.sweep();
  EXPECT_EQ(reg.describe()[0]["state"], "unloaded");
  probe p;
  ASSERT_FALSE(reg.submit("a", p.job()));  // parks and reloads
  EXPECT_EQ(p.done.get_future().get(), "/m/a");
  EXPECT_EQ(reg.describe()[0]["state"], "resident");
}

TEST(registry, describe_reports_the_recurrent_state_bytes) {
  model_registry reg(fake_loader(1, 1ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("h", "/m/hybrid", {}, info));
  ASSERT_FALSE(reg.load("p", "/m/plain", {}, info));
  int seen = 0;
  for (const auto& m : reg.describe()) {
    ASSERT_TRUE(m.contains("state_bytes")) << m.dump();
    if (m["name"] == "h") {
      EXPECT_EQ(m["state_bytes"], 64u);
      EXPECT_EQ(m["cache_bytes"], 96u);
      ++seen;
    } else {
      EXPECT_EQ(m["state_bytes"], 0u);
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2);
}

TEST(registry, close_all_fails_parked_jobs) {
  model_registry reg(fake_loader(1, 1ms, 300ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a", keep(0.01), info));
  std::this_thread::sleep_for(30ms);
  reg.sweep();
  probe p;
  ASSERT_FALSE(reg.submit("a", p.job()));  // parked while reloading
  reg.close_all();
  EXPECT_EQ(p.done.get_future().get().rfind("failed:", 0), 0u);
  std::this_thread::sleep_for(400ms);  // let the detached reload finish before the registry dies
}

std::string state_of(const model_registry& reg, const std::string& alias) {
  for (const auto& m : reg.describe())
    if (m["name"] == alias) return m["state"];
  return "absent";
}

// Runs one job on `alias` and waits for it, and for the worker to count it finished (the job's
// answer comes before the worker records the model's last use); returns what the model said.
std::string run_one(model_registry& reg, const std::string& alias) {
  probe p;
  if (auto e = reg.submit(alias, p.job())) return "refused:" + e->message;
  std::string said = p.done.get_future().get();
  const auto until = std::chrono::steady_clock::now() + 5s;
  auto running = [&] {
    for (const auto& m : reg.describe())
      if (m["name"] == alias) return m.contains("running") && m["running"].get<bool>();
    return false;
  };
  while (running() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return said;
}

TEST(registry_budget, evicts_idle_models_least_recently_used_first) {
  model_registry reg(fake_loader(1, 1ms), budget(300), thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a@100", {}, info));
  ASSERT_FALSE(reg.load("b", "/m/b@100", {}, info));
  ASSERT_FALSE(reg.load("c", "/m/c@100", {}, info));
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(run_one(reg, "c"), "/m/c@100");
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(run_one(reg, "a"), "/m/a@100");
  // Last uses: b (its load) < c < a.
  ASSERT_FALSE(reg.load("d", "/m/d@100", {}, info));
  EXPECT_EQ(state_of(reg, "b"), "unloaded");
  EXPECT_EQ(state_of(reg, "a"), "resident");
  EXPECT_EQ(state_of(reg, "c"), "resident");
  EXPECT_EQ(reg.used_bytes(), 300u);
  // 200 more needs two to go: c, then a (d was loaded after a's last use).
  ASSERT_FALSE(reg.load("e", "/m/e@200", {}, info));
  EXPECT_EQ(state_of(reg, "c"), "unloaded");
  EXPECT_EQ(state_of(reg, "a"), "unloaded");
  EXPECT_EQ(state_of(reg, "d"), "resident");
  EXPECT_EQ(reg.used_bytes(), 300u);
  // An evicted alias still serves: it loads again, evicting the least recently used (d).
  EXPECT_EQ(run_one(reg, "b"), "/m/b@100");
  EXPECT_EQ(state_of(reg, "d"), "unloaded");
  EXPECT_EQ(state_of(reg, "e"), "resident");
  EXPECT_LE(reg.used_bytes(), 300u);
}

TEST(registry_budget, refusal_names_the_sizes_and_evicts_nothing) {
  model_registry reg(fake_loader(400, 5ms), budget(300), thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a@100", {}, info));
  ASSERT_FALSE(reg.load("b", "/m/b@100", {}, info));
  probe busy;
  ASSERT_FALSE(reg.submit("a", busy.job()));
  std::this_thread::sleep_for(20ms);  // a is serving; b is idle
  // Evicting b would still leave 100 + 250 > 300: refused, and b stays.
  auto err = reg.load("c", "/m/c@250", {}, info);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, proto::error_code::load_failed);
  EXPECT_NE(err->message.find("'c' needs 250 B but memory-budget is 300 B and 200 B are in use"), std::string::npos)
      << err->message;
  EXPECT_NE(err->message.find("100 B of it by idle models"), std::string::npos) << err->message;
  EXPECT_NE(err->message.find("serving or loading: a 100 B"), std::string::npos) << err->message;
  EXPECT_EQ(state_of(reg, "a"), "resident");
  EXPECT_EQ(state_of(reg, "b"), "resident");
  EXPECT_EQ(state_of(reg, "c"), "absent");
  EXPECT_EQ(reg.used_bytes(), 200u);
  // A model larger than the whole budget is refused the same way.
  auto huge = reg.load("h", "/m/h@5000", {}, info);
  ASSERT_TRUE(huge);
  EXPECT_NE(huge->message.find("needs 4.9 KiB"), std::string::npos) << huge->message;
  busy.j_cancelled->store(true);
  busy.done.get_future().get();
}

// A swap that does not fit counts the model it would replace as freed, and its message says so
// rather than "0 B are in use" while that model is resident.
TEST(registry_budget, swap_refusal_names_the_model_it_replaces) {
  model_registry reg(fake_loader(400, 5ms), budget(300), thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a@200", {}, info));
  auto err = reg.swap("a", "/m/a2@350", {}, info);
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("'a' needs 350 B but memory-budget is 300 B and 0 B are in use besides the 200 B of "
                              "the model it replaces"),
            std::string::npos)
      << err->message;
  EXPECT_EQ(state_of(reg, "a"), "resident");
}

// Clients submitting back to back on `alias` until stopped; every failure is recorded.
struct load_generator {
  model_registry& reg;
  std::string alias;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::string> failures;
  std::map<std::string, int> served_by;
  std::vector<std::thread> threads;

  load_generator(model_registry& r, std::string a, int n) : reg(r), alias(std::move(a)) {
    for (int i = 0; i < n; ++i)
      threads.emplace_back([this] {
        while (!stop) {
          auto got = run_one(reg, alias);
          std::lock_guard lk(mu);
          if (got.rfind("refused:", 0) == 0 || got.rfind("failed:", 0) == 0) failures.push_back(got);
          else ++served_by[got];
        }
      });
  }
  void finish() {
    stop = true;
    for (auto& t : threads) t.join();
    threads.clear();
  }
  ~load_generator() {
    if (!threads.empty()) finish();
  }
};

TEST(registry_budget, swap_that_does_not_fit_drains_first_and_fails_nothing) {
  model_registry reg(fake_loader(4, 2ms, 30ms), budget(150), thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/old@100", {}, info));
  g_peak = g_live.load();
  load_generator gen(reg, "a", 4);
  std::this_thread::sleep_for(60ms);
  ASSERT_FALSE(reg.swap("a", "/m/new@100", {}, info));  // 100 + 100 > 150: drain-first
  EXPECT_EQ(info.path, "/m/new@100");
  std::this_thread::sleep_for(60ms);
  gen.finish();
  EXPECT_TRUE(gen.failures.empty()) << gen.failures.size() << " failed, first: " << gen.failures.front();
  EXPECT_GT(gen.served_by["/m/old@100"], 0);
  EXPECT_GT(gen.served_by["/m/new@100"], 0);
  EXPECT_LE(g_peak.load(), 150u);  // never both models at once
  const auto m = reg.describe()[0];
  EXPECT_EQ(m["state"], "resident");
  EXPECT_EQ(m["path"], "/m/new@100");
  EXPECT_EQ(m["swaps"], 1u);
  EXPECT_EQ(reg.used_bytes(), 100u);
}

TEST(registry_budget, failed_drain_first_swap_reloads_the_old_model_and_fails_nothing) {
  model_registry reg(fake_loader(4, 2ms, 30ms), budget(150), thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/old@100", {}, info));
  g_peak = g_live.load();
  load_generator gen(reg, "a", 4);
  std::this_thread::sleep_for(60ms);
  auto err = reg.swap("a", "/m/late-fail@100", {}, info);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, proto::error_code::load_failed);
  EXPECT_NE(err->message.find("tensor data is truncated"), std::string::npos) << err->message;
  EXPECT_NE(err->message.find("the old model was loaded again and serves"), std::string::npos) << err->message;
  // A file the sizer already rejects is refused before anything drains.
  auto early = reg.swap("a", "/m/corrupt@100", {}, info);
  ASSERT_TRUE(early);
  EXPECT_EQ(early->code, proto::error_code::load_failed);
  std::this_thread::sleep_for(60ms);
  gen.finish();
  EXPECT_TRUE(gen.failures.empty()) << gen.failures.size() << " failed, first: " << gen.failures.front();
  EXPECT_EQ(gen.served_by.size(), 1u);
  EXPECT_GT(gen.served_by["/m/old@100"], 0);
  EXPECT_LE(g_peak.load(), 150u);
  EXPECT_EQ(reg.describe()[0]["path"], "/m/old@100");
  EXPECT_EQ(state_of(reg, "a"), "resident");
  EXPECT_EQ(reg.used_bytes(), 100u);
}

TEST(registry_budget, swap_that_fits_runs_side_by_side) {
  model_registry reg(fake_loader(20, 5ms), budget(250), thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/old@100", {}, info));
  g_peak = g_live.load();
  probe running;
  ASSERT_FALSE(reg.submit("a", running.job()));
  std::this_thread::sleep_for(20ms);
  ASSERT_FALSE(reg.swap("a", "/m/new@100", {}, info));
  EXPECT_EQ(running.done.get_future().get(), "/m/old@100");
  EXPECT_EQ(g_peak.load(), 200u);
  EXPECT_EQ(reg.describe()[0]["swaps"], 1u);
}

TEST(registry, health_covers_resident_and_still_running_retired_models) {
  model_registry reg(fake_loader(30, 5ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/fine", {}, info));
  EXPECT_TRUE(reg.healthy());
  ASSERT_FALSE(reg.load("w", "/m/wedged", {}, info));
  EXPECT_FALSE(reg.healthy());
  probe running;
  ASSERT_FALSE(reg.submit("w", running.job()));
  std::this_thread::sleep_for(20ms);
  // Swapped away while its request still runs: the old engine still counts.
  ASSERT_FALSE(reg.swap("w", "/m/fine2", {}, info));
  reg.sweep();
  EXPECT_FALSE(reg.healthy());
  EXPECT_EQ(running.done.get_future().get(), "/m/wedged");
  // The worker marks itself idle just after the job's reply; sweep joins it once it has.
  for (int i = 0; i < 200 && !reg.healthy(); ++i) {
    std::this_thread::sleep_for(5ms);
    reg.sweep();
  }
  EXPECT_TRUE(reg.healthy());
}

// ---- load progress: status's `loads` while an open runs, each model's `load` figures after ----

// Polls describe_loads() on its own thread, as status does, keeping every entry it sees.
class loads_watch {
 public:
  explicit loads_watch(const model_registry& reg)
      : thread_([this, &reg] {
          while (!stop_) {
            for (const auto& l : reg.describe_loads()) {
              std::lock_guard lk(mu_);
              seen_.push_back(l);
            }
            std::this_thread::sleep_for(2ms);
          }
        }) {}
  ~loads_watch() { finish(); }
  std::vector<nlohmann::json> finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    std::lock_guard lk(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::vector<nlohmann::json> seen_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once the members it uses exist
};

TEST(registry_progress, a_load_in_progress_shows_its_bytes_and_the_model_keeps_its_figures) {
  model_registry reg(fake_loader(1, 1ms, 200ms), {}, thread_executor());
  loads_watch watch(reg);
  model_info info;
  const auto began = std::chrono::steady_clock::now();
  ASSERT_FALSE(reg.load("a", "/m/a@8000", {}, info));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  const auto seen = watch.finish();
  ASSERT_FALSE(seen.empty());
  bool partway = false;
  std::uint64_t last_done = 0;
  double last_seconds = 0;
  for (const auto& l : seen) {
    EXPECT_EQ(l["name"], "a");
    EXPECT_EQ(l["op"], "load");
    EXPECT_EQ(l["path"], "/m/a@8000");
    const auto done = l["done_bytes"].get<std::uint64_t>(), total = l["total_bytes"].get<std::uint64_t>();
    // 0 only before the loader has said how much it places.
    EXPECT_TRUE(total == 8000 || (total == 0 && done == 0)) << l.dump();
    EXPECT_LE(done, total) << l.dump();
    EXPECT_GE(done, last_done) << l.dump();
    EXPECT_GE(l["seconds"].get<double>(), last_seconds) << l.dump();
    last_done = done;
    last_seconds = l["seconds"].get<double>();
    partway = partway || (done > 0 && done < total);
  }
  EXPECT_TRUE(partway) << seen.size() << " polls, last " << seen.back().dump();
  EXPECT_TRUE(reg.describe_loads().empty());
  ASSERT_TRUE(info.load);  // the load reply's figures
  EXPECT_EQ(info.load->bytes, 8000u);
  EXPECT_GE(info.load->seconds, 0.19);
  EXPECT_LE(info.load->seconds, took);
  const auto m = reg.describe()[0];
  ASSERT_TRUE(m.contains("load")) << m.dump();
  EXPECT_EQ(m["load"]["bytes"], 8000u);
  EXPECT_DOUBLE_EQ(m["load"]["seconds"].get<double>(), info.load->seconds);
  EXPECT_NEAR(m["load"]["bytes_per_second"].get<double>(), 8000 / info.load->seconds, 1e-6);
  // A load that fails leaves nothing in progress behind it.
  ASSERT_TRUE(reg.load("b", "/m/late-fail@10", {}, info));
  EXPECT_TRUE(reg.describe_loads().empty());
}

TEST(registry_progress, a_swap_shows_the_new_file_and_a_failed_one_keeps_the_old_figures) {
  model_registry reg(fake_loader(1, 1ms, 80ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/old@1000", {}, info));
  loads_watch watch(reg);
  ASSERT_FALSE(reg.swap("a", "/m/new@3000", {}, info));
  const auto seen = watch.finish();
  ASSERT_FALSE(seen.empty());
  for (const auto& l : seen) {
    EXPECT_EQ(l["op"], "swap") << l.dump();
    EXPECT_EQ(l["path"], "/m/new@3000") << l.dump();
  }
  ASSERT_TRUE(info.load);
  EXPECT_EQ(info.load->bytes, 3000u);
  EXPECT_EQ(reg.describe()[0]["load"]["bytes"], 3000u);
  ASSERT_TRUE(reg.swap("a", "/m/late-fail@5000", {}, info));
  EXPECT_TRUE(reg.describe_loads().empty());
  EXPECT_EQ(reg.describe()[0]["load"]["bytes"], 3000u);  // still the model that serves
}

TEST(registry_progress, a_reload_after_idle_unload_shows_as_reload) {
  model_registry reg(fake_loader(1, 1ms, 80ms), {}, thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/a@2000", keep(0.05), info));
  std::this_thread::sleep_for(100ms);
  reg.sweep();
  const auto before = reg.describe()[0];
  EXPECT_EQ(before["state"], "unloaded");
  EXPECT_FALSE(before.contains("load")) << before.dump();  // figures belong to a resident model
  loads_watch watch(reg);
  probe p;
  ASSERT_FALSE(reg.submit("a", p.job()));
  EXPECT_EQ(p.done.get_future().get(), "/m/a@2000");
  const auto seen = watch.finish();
  ASSERT_FALSE(seen.empty());
  for (const auto& l : seen) EXPECT_EQ(l["op"], "reload") << l.dump();
  EXPECT_EQ(reg.describe()[0]["load"]["bytes"], 2000u);
}

TEST(registry_progress, a_failed_drain_first_swap_shows_the_old_file_loading_again) {
  model_registry reg(fake_loader(1, 1ms, 80ms), budget(150), thread_executor());
  model_info info;
  ASSERT_FALSE(reg.load("a", "/m/old@100", {}, info));
  loads_watch watch(reg);
  ASSERT_TRUE(reg.swap("a", "/m/late-fail@100", {}, info));
  const auto seen = watch.finish();
  std::set<std::string> opens;
  for (const auto& l : seen) opens.insert(l["op"].get<std::string>() + " " + l["path"].get<std::string>());
  EXPECT_EQ(opens, (std::set<std::string>{"swap /m/late-fail@100", "reload /m/old@100"}));
  EXPECT_TRUE(reg.describe_loads().empty());
  EXPECT_EQ(reg.describe()[0]["load"]["bytes"], 100u);
}

}  // namespace
}  // namespace tandem::daemon
