// The serving scheduler on tiny models (CPU backend): batched greedy generations equal to the
// same requests run alone, FIFO waiting beyond the slots, cancel and a refusing sink freeing a
// slot within one step (also during prefill), prefix reuse, refused prompts, a failing pass,
// greedy passes through forward_argmax.
#include <gtest/gtest.h>

#include <atomic>

#include "counting_backend.h"
#include "runtime/forward_watch.h"
#include "scheduler_test_util.h"

namespace tandem {
namespace {

using namespace std::chrono_literals;
using namespace test;

TEST(scheduler, batched_greedy_equals_alone) { check_batched_equals_alone("qwen3", false); }
TEST(scheduler, batched_greedy_equals_alone_hybrid) { check_batched_equals_alone("qwen35", false); }
TEST(scheduler, batched_greedy_equals_alone_moe) { check_batched_equals_alone("qwen3moe", false); }

// Twelve requests over four slots with long prompt chunks beside decode tokens: all complete.
TEST(scheduler, mixed_prefill_and_decode_passes) {
  auto e = make_engine("qwen3", 4, 256);
  scheduler s(*e.be, *e.cache, text_of, {.chunk_tokens = 64});
  std::vector<std::future<result<generate_result>>> runs;
  for (int i = 0; i < 12; ++i)
    runs.push_back(std::async(std::launch::async, [&s, i] { return s.generate(greedy(prompt_of(i, 20 + 9 * i), 16), {}); }));
  for (auto& r : runs) {
    auto res = r.get();
    ASSERT_TRUE(res.ok()) << res.message();
    EXPECT_EQ(res->tokens.size(), 16u);
  }
}

TEST(scheduler, step_budget_bounds_every_pass) {
  auto e = make_engine("qwen3", 2);
  counting_backend be(*e.be);
  scheduler s(be, *e.cache, text_of, {.chunk_tokens = 4});
  auto a = std::async(std::launch::async, [&] { return s.generate(greedy(prompt_of(1, 30), 6), {}); });
  auto b = std::async(std::launch::async, [&] { return s.generate(greedy(prompt_of(2, 3), 6), {}); });
  ASSERT_TRUE(a.get().ok());
  ASSERT_TRUE(b.get().ok());
  EXPECT_LE(be.max_batch.load(), 4u + 2u);  // a chunk of prompt plus one token per slot
}

// A cancel during a long prompt's prefill frees its slot within a step, and the request waiting
// for that slot runs.
TEST(scheduler, cancel_during_prefill_frees_the_slot) {
  auto e = make_engine("qwen3", 1);
  counting_backend be(*e.be);
  be.delay_ms = 5;
  scheduler s(be, *e.cache, text_of, {.chunk_tokens = 2});
  std::promise<result<generate_result>> first, second;
  auto id = s.submit(greedy(prompt_of(1, 60), 4), {}, [&](result<generate_result> r) { first.set_value(std::move(r)); });
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(s.submit(greedy(prompt_of(2, 4), 4), {}, [&](result<generate_result> r) { second.set_value(std::move(r)); })
                  .ok());
  ASSERT_TRUE(eventually([&] { return be.forwards >= 2; }));
  EXPECT_EQ(s.counts().waiting, 1u);
  const int at_cancel = be.forwards;
  s.cancel(*id);
  auto r1 = first.get_future().get();
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->reason, stop_reason::cancelled);
  EXPECT_TRUE(r1->tokens.empty());
  EXPECT_LE(be.forwards - at_cancel, 1);  // at most the pass already running
  auto r2 = second.get_future().get();
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->tokens.size(), 4u);
}

// A sink that answers false (its client gone) ends the request, also before its first token.
TEST(scheduler, refusing_sink_cancels) {
  auto e = make_engine("qwen3", 2);
  counting_backend be(*e.be);
  be.delay_ms = 5;  // 28 passes of at least 5 ms: the sink refuses long before the end
  scheduler s(be, *e.cache, text_of, {.chunk_tokens = 2});
  std::atomic<bool> gone{false};
  auto r = std::async(std::launch::async, [&] {
    return s.generate(greedy(prompt_of(3, 40), 8), [&](std::string_view) { return !gone.load(); });
  });
  ASSERT_TRUE(eventually([&] { return s.counts().steps >= 2; }));
  gone = true;
  auto res = r.get();
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->reason, stop_reason::cancelled);
  EXPECT_TRUE(eventually([&] { return s.counts().running == 0; }));
}

// A prompt that starts with a finished request's prompt and answer starts from its cached KV
// and gives what a fresh run gives.
TEST(scheduler, prefix_reuse_skips_the_cached_tokens) {
  auto e = make_engine("qwen3", 2);
  scheduler s(*e.be, *e.cache, text_of, {.chunk_tokens = 16});
  auto p1 = prompt_of(4, 12);
  auto r1 = s.generate(greedy(p1, 6), {});
  ASSERT_TRUE(r1.ok()) << r1.message();
  EXPECT_EQ(r1->n_reused, 0u);
  auto p2 = p1;
  p2.insert(p2.end(), r1->tokens.begin(), r1->tokens.end());
  for (int32_t t : {7, 8, 9}) p2.push_back(t);
  auto r2 = s.generate(greedy(p2, 6), {});
  ASSERT_TRUE(r2.ok());
  // The cache held the prompt and the answer's tokens but the last (sampled, never fed).
  EXPECT_EQ(r2->n_reused, p1.size() + r1->tokens.size() - 1);
  EXPECT_EQ(s.counts().prefix_hits, 1u);
  auto fresh = make_engine("qwen3", 1);
  scheduler f(*fresh.be, *fresh.cache, text_of, {.prefix_reuse = false});
  auto r3 = f.generate(greedy(p2, 6), {});
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r2->tokens, r3->tokens);
  // The same prompt again: all but its last token come from the cache.
  auto r4 = s.generate(greedy(p2, 6), {});
  ASSERT_TRUE(r4.ok());
  EXPECT_EQ(r4->n_reused, p2.size() - 1);
  EXPECT_EQ(r4->tokens, r3->tokens);
}

TEST(scheduler, refuses_bad_prompts_without_calling_back) {
  auto e = make_engine("qwen3", 1, /*n_ctx=*/16);
  scheduler s(*e.be, *e.cache, text_of);
  bool called = false;
  auto cb = [&](result<generate_result>) { called = true; };
  EXPECT_FALSE(s.submit(greedy({}, 4), {}, cb).ok());
  EXPECT_FALSE(s.submit(greedy(prompt_of(1, 17), 4), {}, cb).ok());
  EXPECT_FALSE(s.submit(greedy({1, 2, int32_t(e.be->n_vocab())}, 4), {}, cb).ok());
  EXPECT_FALSE(called);
  auto ok = s.generate(greedy(prompt_of(1, 10), 10), {});
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->reason, stop_reason::context_limit);  // 10 + 6 generated fill the 16 slots
  EXPECT_EQ(ok->tokens.size(), 7u);
}

// A failing pass fails the requests it carried with the backend's message; the slots are
// usable afterwards.
TEST(scheduler, failed_pass_fails_its_requests) {
  auto e = make_engine("qwen3", 2);
  counting_backend be(*e.be);
  scheduler s(be, *e.cache, text_of);
  be.fail = true;
  auto r = s.generate(greedy(prompt_of(1, 8), 4), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("injected failure"), std::string::npos);
  be.fail = false;
  auto ok = s.generate(greedy(prompt_of(1, 8), 4), {});
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->tokens.size(), 4u);
}

// A KV pool smaller than slots × context: cached prefixes of free slots give way first; a
// sequence that still finds no block ends with an error, and the one beside it is untouched.
TEST(scheduler, small_pool_stops_one_sequence_cleanly) {
  auto e = make_engine("qwen3", 2);
  kv_cache_config cfg;
  cfg.n_ctx = 64;
  cfg.n_seq_max = 2;
  cfg.block_size = 16;
  cfg.n_blocks = 5;  // 80 tokens for two sequences of up to 64
  auto cache = e.be->make_cache(cfg);
  ASSERT_TRUE(cache.ok()) << cache.message();
  counting_backend be(*e.be);
  be.delay_ms = 2;
  scheduler s(be, **cache, text_of, {.chunk_tokens = 8});
  EXPECT_FALSE(s.submit(greedy(prompt_of(1, 81), 4), {}, {}).ok());  // more than the pool
  // One request alone leaves its KV cached (3 blocks); the next needs 5 and gets them.
  ASSERT_TRUE(s.generate(greedy(prompt_of(1, 30), 10), {}).ok());
  auto big = s.generate(greedy(prompt_of(2, 30), 40), {});
  ASSERT_TRUE(big.ok()) << big.message();
  EXPECT_EQ(big->tokens.size(), 35u);  // 30 + 34 fed fill the 64-token context
  // Two such requests at once (submitted together, so they share passes): 140 tokens do not fit in 80.
  std::promise<result<generate_result>> pa, pb;
  ASSERT_TRUE(s.submit(greedy(prompt_of(3, 30), 40), {}, [&](result<generate_result> r) { pa.set_value(std::move(r)); }).ok());
  ASSERT_TRUE(s.submit(greedy(prompt_of(4, 30), 40), {}, [&](result<generate_result> r) { pb.set_value(std::move(r)); }).ok());
  auto ra = pa.get_future().get(), rb = pb.get_future().get();
  ASSERT_NE(ra.ok(), rb.ok()) << (ra.ok() ? "" : ra.message()) << " / " << (rb.ok() ? "" : rb.message());
  const auto& failed = ra.ok() ? rb : ra;
  EXPECT_NE(failed.message().find("KV pool"), std::string::npos) << failed.message();
  const auto& done = ra.ok() ? ra : rb;
  auto fresh = make_engine("qwen3", 1);
  scheduler f(*fresh.be, *fresh.cache, text_of, {.chunk_tokens = 8});
  auto alone = f.generate(greedy(prompt_of(ra.ok() ? 3 : 4, 30), 40), {});
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(done->tokens, alone->tokens);
}

// Passes whose logits rows are all greedy take the backend's argmax (also through the stall
// watch, as tandemd wires it); a sampled request makes the passes carrying its rows read the
// logits. The greedy requests' texts are the same either way.
TEST(scheduler, greedy_passes_use_forward_argmax) {
  const auto run_greedy = [](scheduler& s, std::vector<std::promise<result<generate_result>>>& done) {
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE(s.submit(greedy(prompt_of(i, 10), 12), {},
                           [&done, i](result<generate_result> r) { done[size_t(i)].set_value(std::move(r)); })
                      .ok());
  };
  std::vector<std::string> texts;
  {
    auto e = make_engine("qwen3", 3);
    counting_backend be(*e.be);
    forward_watch watch(std::chrono::duration<double>(0));
    watched_backend watched(be, watch);
    scheduler s(watched, *e.cache, text_of);
    std::vector<std::promise<result<generate_result>>> done(2);
    run_greedy(s, done);
    for (auto& d : done) {
      auto r = d.get_future().get();
      ASSERT_TRUE(r.ok()) << r.message();
      EXPECT_EQ(r->tokens.size(), 12u);
      texts.push_back(r->text);
    }
    EXPECT_EQ(be.logits_passes.load(), 0);
    EXPECT_EQ(uint64_t(be.argmax_passes.load()), s.counts().steps);
  }
  auto e = make_engine("qwen3", 3);
  counting_backend be(*e.be);
  scheduler s(be, *e.cache, text_of);
  session_request sampled = greedy(prompt_of(5, 10), 3);
  sampled.params.sampling.temperature = 0.8f;
  sampled.params.sampling.seed = 11;
  std::promise<result<generate_result>> sampled_done;
  // Submitted first, so it shares its passes with the greedy requests' first ones at most.
  ASSERT_TRUE(s.submit(sampled, {}, [&](result<generate_result> r) { sampled_done.set_value(std::move(r)); }).ok());
  std::vector<std::promise<result<generate_result>>> done(2);
  run_greedy(s, done);
  for (size_t i = 0; i < done.size(); ++i) {
    auto r = done[i].get_future().get();
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->text, texts[i]) << i;
  }
  auto r = sampled_done.get_future().get();
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->tokens.size(), 3u);
  // Its three tokens came from three passes (one prompt chunk, two decode tokens) that read the
  // logits; every other pass (the greedy requests' last nine tokens at least) took argmaxes.
  EXPECT_EQ(be.logits_passes.load(), 3);
  EXPECT_GE(be.argmax_passes.load(), 9);
  EXPECT_EQ(uint64_t(be.forwards.load()), s.counts().steps);
}

// Destroying the scheduler ends what is running or waiting as cancelled.
TEST(scheduler, shutdown_cancels_what_is_left) {
  auto e = make_engine("qwen3", 1);
  counting_backend be(*e.be);
  be.delay_ms = 5;
  std::promise<result<generate_result>> a, b;
  {
    scheduler s(be, *e.cache, text_of);
    ASSERT_TRUE(s.submit(greedy(prompt_of(1, 8), 1000), {}, [&](result<generate_result> r) { a.set_value(std::move(r)); }).ok());
    ASSERT_TRUE(s.submit(greedy(prompt_of(2, 8), 4), {}, [&](result<generate_result> r) { b.set_value(std::move(r)); }).ok());
    ASSERT_TRUE(eventually([&] { return be.forwards >= 3; }));
  }
  auto ra = a.get_future().get(), rb = b.get_future().get();
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->reason, stop_reason::cancelled);
  EXPECT_EQ(rb->reason, stop_reason::cancelled);
}

}  // namespace
}  // namespace tandem
