// Sampler: determinism per seed, greedy (and when it reduces to the backend's argmax), and the
// effect of each filter and penalty.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "backend/backend.h"
#include "runtime/sampler.h"
#include "tiny_model.h"

namespace tandem {
namespace {

std::vector<candidate> cands(const std::vector<float>& logits) {
  std::vector<candidate> c;
  for (size_t i = 0; i < logits.size(); ++i) c.push_back({int32_t(i), logits[i], 0.f});
  return c;
}
std::set<int32_t> ids(const std::vector<candidate>& c) {
  std::set<int32_t> s;
  for (auto& x : c) s.insert(x.id);
  return s;
}

TEST(sampler, same_seed_same_tokens_other_seed_differs) {
  auto logits = test::random_floats(500, 3, -2, 2);
  sampling_params p;
  p.temperature = 1.5f;
  p.top_k = 0;
  p.top_p = 1.f;
  p.min_p = 0.f;
  p.seed = 42;
  auto draw = [&](uint64_t seed) {
    p.seed = seed;
    sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.sample(logits));
    return out;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
  auto a = draw(42);
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 10u);  // really random
}

TEST(sampler, greedy_is_argmax) {
  auto logits = test::random_floats(300, 4, -5, 5);
  sampling_params p;
  p.temperature = 0;
  sampler s(p);
  EXPECT_EQ(s.sample(logits), std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TEST(sampler, greedy_needs_zero_temperature_and_no_active_penalty) {
  sampling_params p;
  EXPECT_FALSE(sampler(p).greedy());  // the defaults sample at 0.8
  p.temperature = 0;
  EXPECT_TRUE(sampler(p).greedy());
  p.temperature = -1;
  EXPECT_TRUE(sampler(p).greedy());
  p.top_k = 1, p.top_p = 0.5f, p.min_p = 0.5f, p.seed = 9;  // filters do not matter when greedy
  EXPECT_TRUE(sampler(p).greedy());
  for (int which = 0; which < 3; ++which) {
    sampling_params q;
    q.temperature = 0;
    if (which == 0) q.repeat_penalty = 1.1f;
    if (which == 1) q.presence_penalty = 0.5f;
    if (which == 2) q.frequency_penalty = 0.5f;
    EXPECT_FALSE(sampler(q).greedy()) << which;
    q.penalty_last_n = 0;  // an empty window: the penalty never applies
    EXPECT_TRUE(sampler(q).greedy()) << which;
  }
  p.temperature = 0.01f;
  EXPECT_FALSE(sampler(p).greedy());
}

// When greedy(), sample() is the backend's argmax_logits whatever the window holds: the same
// tie rule (the lowest of equal ids) on rows full of ties.
TEST(sampler, greedy_sample_equals_backend_argmax) {
  sampling_params p;
  p.temperature = 0;
  p.repeat_penalty = 1.5f;
  p.penalty_last_n = 0;
  sampler s(p);
  ASSERT_TRUE(s.greedy());
  for (uint64_t seed = 0; seed < 50; ++seed) {
    auto row = test::random_floats(64, seed, -3, 3);
    for (auto& x : row) x = std::round(x);  // seven values over 64 ids: the maximum is shared
    const int32_t pick = s.sample(row);
    EXPECT_EQ(pick, argmax_logits(row)) << seed;
    s.accept(pick);
  }
  EXPECT_EQ(s.sample(std::vector<float>{1.f, 3.f, 0.f, 3.f}), 1);
}

TEST(sampler, top_k_keeps_the_k_largest) {
  auto c = cands({0.5f, 3.f, -1.f, 2.f, 2.5f});
  keep_top_k(c, 2);
  EXPECT_EQ(ids(c), (std::set<int32_t>{1, 4}));
  EXPECT_EQ(c[0].id, 1);
}

TEST(sampler, top_p_keeps_smallest_prefix_reaching_mass) {
  // Probabilities 0.5, 0.25, 0.125, 0.125 (logits as log2 ratios).
  const float l2 = std::log(2.f);
  auto c = cands({3 * l2, 2 * l2, l2, l2});
  keep_top_p(c, 0.7f);
  EXPECT_EQ(ids(c), (std::set<int32_t>{0, 1}));
  auto c2 = cands({3 * l2, 2 * l2, l2, l2});
  keep_top_p(c2, 0.5f);
  EXPECT_EQ(ids(c2), (std::set<int32_t>{0}));
}

TEST(sampler, min_p_cuts_relative_to_the_best) {
  const float l2 = std::log(2.f);
  auto c = cands({3 * l2, 2 * l2, l2, 0.f});  // p ratios 1, 1/2, 1/4, 1/8 of the best
  keep_min_p(c, 0.3f);
  EXPECT_EQ(ids(c), (std::set<int32_t>{0, 1}));
}

TEST(sampler, penalties_lower_seen_tokens) {
  sampling_params p;
  p.repeat_penalty = 2.f;
  auto c = cands({4.f, -1.f, 3.f});
  std::vector<int32_t> recent = {0, 1};
  apply_penalties(c, recent, p);
  EXPECT_FLOAT_EQ(c[0].logit, 2.f);   // positive: divided
  EXPECT_FLOAT_EQ(c[1].logit, -2.f);  // negative: multiplied
  EXPECT_FLOAT_EQ(c[2].logit, 3.f);   // unseen: untouched
  sampling_params q;
  q.presence_penalty = 0.5f;
  q.frequency_penalty = 0.25f;
  auto d = cands({1.f, 1.f, 1.f});
  std::vector<int32_t> rec2 = {2, 2, 2, 0};
  apply_penalties(d, rec2, q);
  EXPECT_FLOAT_EQ(d[0].logit, 1.f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(d[1].logit, 1.f);
  EXPECT_FLOAT_EQ(d[2].logit, 1.f - 0.5f - 0.75f);
}

TEST(sampler, penalty_changes_greedy_choice_and_window_forgets) {
  std::vector<float> logits = {2.f, 1.9f, 0.f};
  sampling_params p;
  p.temperature = 0;
  p.repeat_penalty = 1.5f;
  p.penalty_last_n = 2;
  sampler s(p);
  EXPECT_EQ(s.sample(logits), 0);
  s.accept(0);
  EXPECT_EQ(s.sample(logits), 1);  // 2/1.5 < 1.9
  s.accept(1);
  s.accept(2);  // window of 2 now holds {1, 2}: token 0 is forgotten
  EXPECT_EQ(s.sample(logits), 0);
}

TEST(sampler, top_k_one_is_greedy_whatever_the_seed) {
  auto logits = test::random_floats(100, 9, -1, 1);
  const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  for (uint64_t seed = 0; seed < 20; ++seed) {
    sampling_params p;
    p.top_k = 1;
    p.seed = seed;
    sampler s(p);
    EXPECT_EQ(s.sample(logits), best);
  }
}

TEST(sampler, low_temperature_concentrates_high_spreads) {
  auto logits = test::random_floats(50, 11, -1, 1);
  auto distinct = [&](float temp) {
    sampling_params p;
    p.temperature = temp;
    p.top_k = 0, p.top_p = 1.f, p.min_p = 0.f, p.seed = 7;
    sampler s(p);
    std::set<int32_t> seen;
    for (int i = 0; i < 200; ++i) seen.insert(s.sample(logits));
    return seen.size();
  };
  EXPECT_LE(distinct(0.01f), 2u);
  EXPECT_GT(distinct(5.f), 30u);
}

}  // namespace
}  // namespace tandem
