// Generation on a tiny model (deterministic greedy, stops, streaming) and perplexity's chunk rule.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "runtime/generator.h"
#include "runtime/perplexity.h"
#include "counting_backend.h"
#include "tiny_model.h"

namespace tandem {
namespace {

struct engine {
  std::unique_ptr<test::tiny_model> model;
  std::unique_ptr<backend> be;
  std::unique_ptr<kv_cache> cache;
};

engine make_engine(uint32_t n_ctx = 64) {
  engine e;
  test::tiny_model_options opt;
  opt.matrix_type = ggml_type::q8_0;
  auto m = test::make_tiny_model(opt);
  EXPECT_TRUE(m.ok()) << m.message();
  e.model = std::move(m.value());
  e.be = std::move(make_cpu_backend(e.model->desc, {.n_threads = 2}).value());
  kv_cache_config cfg;
  cfg.n_ctx = n_ctx;
  e.cache = std::move(e.be->make_cache(cfg).value());
  return e;
}

// Token i stands for the text "<i>". Built this way round: `"<" + to_string` trips a false
// -Wrestrict in GCC 12.
std::string text_of(int32_t id) {
  std::string s = "<";
  s += std::to_string(id);
  s += '>';
  return s;
}

const std::vector<int32_t> k_prompt = {3, 14, 15, 92, 65, 35};

TEST(generator, greedy_is_deterministic_and_matches_manual_argmax) {
  auto e = make_engine();
  generate_params gp;
  gp.sampling.temperature = 0;
  gp.max_tokens = 12;
  gp.n_batch = 4;  // prompt over two forward passes
  std::string streamed;
  auto r1 = generate(*e.be, *e.cache, 0, k_prompt, gp, text_of, [&](std::string_view s) {
    streamed += s;
    return true;
  });
  ASSERT_TRUE(r1.ok()) << r1.message();
  EXPECT_EQ(r1->tokens.size(), 12u);
  EXPECT_EQ(r1->reason, stop_reason::max_tokens);
  EXPECT_EQ(streamed, r1->text);
  auto r2 = generate(*e.be, *e.cache, 0, k_prompt, gp, text_of, {});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r1->tokens, r2->tokens);
  // The same by hand: one batched forward per step over the whole sequence so far.
  std::vector<int32_t> seq = k_prompt;
  for (int step = 0; step < 12; ++step) {
    auto f = make_engine();
    batch b;
    for (size_t i = 0; i < seq.size(); ++i) b.add(seq[i], 0, int32_t(i), i + 1 == seq.size());
    std::vector<float> logits;
    ASSERT_TRUE(f.be->forward(b, *f.cache, logits).ok());
    seq.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  EXPECT_EQ(std::vector<int32_t>(seq.begin() + k_prompt.size(), seq.end()), r1->tokens);
}

TEST(generator, stops_on_token_string_and_context) {
  auto e = make_engine(/*n_ctx=*/12);
  generate_params gp;
  gp.sampling.temperature = 0;
  gp.max_tokens = 20;
  auto free_run = generate(*e.be, *e.cache, 0, k_prompt, gp, text_of, {});
  ASSERT_TRUE(free_run.ok());
  // 6 prompt tokens in a context of 12: the 7th generated token has no room to be decoded.
  EXPECT_EQ(free_run->reason, stop_reason::context_limit);
  EXPECT_EQ(free_run->tokens.size(), 7u);

  gp.stop_tokens = {free_run->tokens[2]};
  auto by_token = generate(*e.be, *e.cache, 0, k_prompt, gp, text_of, {});
  ASSERT_TRUE(by_token.ok());
  EXPECT_EQ(by_token->reason, stop_reason::stop_token);
  EXPECT_EQ(by_token->tokens.back(), free_run->tokens[2]);
  EXPECT_EQ(by_token->text.find(text_of(free_run->tokens[2])), std::string::npos);

  gp.stop_tokens.clear();
  gp.stop_strings = {text_of(free_run->tokens[3])};
  std::string streamed;
  auto by_string = generate(*e.be, *e.cache, 0, k_prompt, gp, text_of, [&](std::string_view s) {
    streamed += s;
    return true;
  });
  ASSERT_TRUE(by_string.ok());
  EXPECT_EQ(by_string->reason, stop_reason::stop_string);
  EXPECT_EQ(streamed.find(gp.stop_strings[0]), std::string::npos);

  std::vector<int32_t> long_prompt(13, 5);
  EXPECT_FALSE(generate(*e.be, *e.cache, 0, long_prompt, gp, text_of, {}).ok());
}

TEST(generator, cancel_from_callback) {
  auto e = make_engine();
  generate_params gp;
  gp.max_tokens = 10;
  int calls = 0;
  auto r = generate(*e.be, *e.cache, 0, k_prompt, gp, text_of, [&](std::string_view) {
    return ++calls < 3;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reason, stop_reason::cancelled);
  EXPECT_EQ(r->tokens.size(), 3u);
}

using test::counting_backend;

TEST(generator, cancel_during_prefill_stops_between_chunks) {
  auto e = make_engine();
  counting_backend be(*e.be);
  generate_params gp;
  gp.max_tokens = 10;
  gp.n_batch = 2;  // the 6-token prompt takes three passes
  gp.cancelled = [&] { return be.forwards >= 1; };
  bool got_text = false;
  auto r = generate(be, *e.cache, 0, k_prompt, gp, text_of, [&](std::string_view) {
    got_text = true;
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->reason, stop_reason::cancelled);
  EXPECT_EQ(be.forwards.load(), 1);  // one chunk ran, the other two never did
  EXPECT_TRUE(r->tokens.empty());
  EXPECT_EQ(r->n_prompt, k_prompt.size());
  EXPECT_FALSE(got_text);
  EXPECT_EQ(e.cache->length(0), 0u);  // the partial prompt was dropped

  // Cancelled before anything ran: no pass at all. And the instance still generates afterwards.
  be.forwards = 0;
  gp.cancelled = [] { return true; };
  r = generate(be, *e.cache, 0, k_prompt, gp, text_of, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reason, stop_reason::cancelled);
  EXPECT_EQ(be.forwards.load(), 0);
  gp.cancelled = {};
  r = generate(be, *e.cache, 0, k_prompt, gp, text_of, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reason, stop_reason::max_tokens);
  EXPECT_EQ(r->tokens.size(), 10u);
}

TEST(generator, cancel_flag_stops_decoding_without_text_callback) {
  auto e = make_engine();
  counting_backend be(*e.be);
  generate_params gp;
  gp.max_tokens = 10;
  gp.n_batch = 8;  // prefill in one pass
  gp.cancelled = [&] { return be.forwards >= 3; };
  auto r = generate(be, *e.cache, 0, k_prompt, gp, text_of, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reason, stop_reason::cancelled);
  EXPECT_EQ(be.forwards.load(), 3);       // prefill + two decode passes
  EXPECT_EQ(r->tokens.size(), 3u);  // each pass gave a token; the third was sampled, not decoded
}

// A greedy generation takes every token from forward_argmax (no logits row copied); a sampled
// one whose filters leave only the best token (top_k 1) reads the logits and gives the same.
TEST(generator, greedy_uses_forward_argmax_and_matches_sampling_the_logits) {
  auto e = make_engine();
  counting_backend be(*e.be);
  generate_params gp;
  gp.sampling.temperature = 0;
  gp.max_tokens = 8;
  gp.n_batch = 4;  // the 6-token prompt takes two passes
  auto greedy = generate(be, *e.cache, 0, k_prompt, gp, text_of, {});
  ASSERT_TRUE(greedy.ok()) << greedy.message();
  EXPECT_EQ(be.logits_passes.load(), 0);
  EXPECT_EQ(be.argmax_passes.load(), 2 + 7);  // prefill, then a pass per token but the last
  be.argmax_passes = 0;
  gp.sampling.temperature = 0.8f;
  gp.sampling.top_k = 1;
  auto sampled = generate(be, *e.cache, 0, k_prompt, gp, text_of, {});
  ASSERT_TRUE(sampled.ok()) << sampled.message();
  EXPECT_EQ(be.argmax_passes.load(), 0);
  EXPECT_EQ(be.logits_passes.load(), 2 + 7);
  EXPECT_EQ(sampled->tokens, greedy->tokens);
  EXPECT_EQ(sampled->text, greedy->text);
}

// next(logits) is the sampler's pick then next_token: the same token, text and stops, and the
// token goes into the penalty window either way.
TEST(generator, next_token_equals_next_on_the_same_logits) {
  generate_params gp;
  gp.sampling.temperature = 0;
  gp.stop_tokens = {42};
  gp.stop_strings = {"<3><8>"};
  // Rows whose greedy pick runs 5, 12, 3, 8: a stop string held back over two tokens. Each
  // row has its maximum twice; the lower id wins.
  std::vector<std::vector<float>> rows;
  for (int32_t t : {5, 12, 3, 8, 42}) {
    std::vector<float> row(64, 0.f);
    row[size_t(t)] = row[size_t(t) + 7] = 2.f;
    rows.push_back(row);
  }
  token_stream a(gp, text_of, k_prompt), b(gp, text_of, k_prompt);
  ASSERT_TRUE(a.greedy() && b.greedy());
  std::vector<int32_t> picked;
  for (const auto& row : rows) {
    const token_step x = a.next(row), y = b.next_token(argmax_logits(row));
    EXPECT_EQ(x.token, y.token);
    EXPECT_EQ(x.text, y.text);
    EXPECT_EQ(x.stop_token, y.stop_token);
    EXPECT_EQ(x.stop_string, y.stop_string);
    picked.push_back(y.token);
    if (y.stop_string) break;
  }
  EXPECT_EQ(picked, (std::vector<int32_t>{5, 12, 3, 8}));  // the stop string ended it
  EXPECT_EQ(a.flush(), b.flush());

  // With a repeat penalty (not greedy()) b feeds every other token through next_token: its
  // window must hold them, or its next pick repeats what a's penalty steers away from.
  generate_params pp;
  pp.sampling.temperature = 0;
  pp.sampling.repeat_penalty = 1.5f;
  const std::vector<float> row = {2.f, 1.9f, 1.8f, 1.7f, 0.f};
  token_stream c(pp, text_of, {}), d(pp, text_of, {});
  EXPECT_FALSE(c.greedy());
  for (int i = 0; i < 4; ++i) {
    const token_step x = c.next(row);
    const token_step y = i % 2 == 0 ? d.next(row) : d.next_token(x.token);
    EXPECT_EQ(x.token, i) << i;  // each pick pushes the next best ahead
    EXPECT_EQ(y.token, x.token) << i;
    EXPECT_EQ(y.text, x.text) << i;
  }
}

TEST(generator, utf8_prefix_holds_back_partial_characters) {
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("a\xE2\x82"), 1u);      // € missing its last byte
  EXPECT_EQ(utf8_complete_prefix("a\xE2\x82\xAC"), 4u);  // complete €
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);   // emoji, 3 of 4 bytes
  EXPECT_EQ(utf8_complete_prefix("x\xC3"), 1u);
}

TEST(generator, stop_string_filter_holds_back_possible_starts) {
  stop_string_filter f({"STOP", "<end>"});
  bool stopped = false;
  EXPECT_EQ(f.push("hello ST", stopped), "hello ");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(f.push("AR", stopped), "STAR");
  EXPECT_EQ(f.push("x <en", stopped), "x ");
  EXPECT_EQ(f.push("d> more", stopped), "");
  EXPECT_TRUE(stopped);
  stop_string_filter g({"zz"});
  EXPECT_EQ(g.push("abz", stopped), "ab");
  EXPECT_EQ(g.flush(), "z");
}

TEST(perplexity, scores_second_half_of_each_chunk) {
  auto e = make_engine(/*n_ctx=*/16);
  auto toks_f = test::random_floats(40, 21, 0, 95.99f);
  std::vector<int32_t> toks;
  for (float v : toks_f) toks.push_back(int32_t(v));
  perplexity_params p;
  p.n_ctx = 16;
  p.n_batch = 5;
  p.bos_id = 1;
  auto r = perplexity(*e.be, *e.cache, toks, p);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->n_chunks, 2u);      // 40 / 16, the remainder dropped
  EXPECT_EQ(r->n_scored, 2u * 7);  // 16 - 1 - 8 per chunk
  // By hand: each chunk from an empty cache with BOS first, log-probs of positions 8..14.
  double nll = 0;
  for (int c = 0; c < 2; ++c) {
    e.cache->clear(0);
    batch b;
    for (int i = 0; i < 16; ++i) b.add(i == 0 ? 1 : toks[c * 16 + i], 0, i, true);
    std::vector<float> logits;
    ASSERT_TRUE(e.be->forward(b, *e.cache, logits).ok());
    const size_t V = e.be->n_vocab();
    for (int i = 8; i < 15; ++i)
      nll -= log_softmax_at(std::span<const float>(logits.data() + i * V, V), toks[c * 16 + i + 1]);
  }
  EXPECT_NEAR(r->ppl, std::exp(nll / 14), 1e-6 * r->ppl);
  EXPECT_EQ(r->running.size(), 2u);
  EXPECT_GT(r->ppl_error, 0);

  std::vector<int32_t> short_text(31, 4);
  EXPECT_FALSE(perplexity(*e.be, *e.cache, short_text, p).ok());
}

}  // namespace
}  // namespace tandem
