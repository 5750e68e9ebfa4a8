// The CPU backend on tiny random MoE models (qwen3moe: qwen3 attention; qwen35moe: the hybrid
// layers with a shared expert): prefill == token-by-token decode, sequences sharing a batch stay
// independent, and the routed FFN really changes the result (not a dense FFN in disguise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "tiny_model.h"

namespace tandem {
namespace {

std::unique_ptr<test::tiny_model> moe_model(const std::string& arch, ggml_type type = ggml_type::f32,
                                            uint32_t k = 2) {
  test::tiny_model_options o;
  o.arch = arch;
  o.hp = arch == "qwen35moe" ? test::tiny_model_options::qwen35moe_hparams()
                             : test::tiny_model_options::qwen3moe_hparams();
  o.hp.n_expert_used = k;
  o.matrix_type = type;
  auto m = test::make_tiny_model(o);
  if (!m) ADD_FAILURE() << m.message();
  return m ? std::move(m.value()) : nullptr;
}

std::vector<int32_t> tokens(size_t n, uint32_t vocab) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t((i * 37 + 11) % vocab);
  return t;
}

float max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float scale = 1e-6f, d = 0;
  for (size_t i = 0; i < a.size(); ++i) scale = std::max(scale, std::fabs(a[i])), d = std::max(d, std::fabs(a[i] - b[i]));
  return d / scale;
}

struct runner {
  std::unique_ptr<backend> be;
  std::unique_ptr<kv_cache> cache;
  std::vector<float> logits;
  explicit runner(const model_desc& d, uint32_t n_seq = 2) {
    be = std::move(make_cpu_backend(d, {2}).value());
    kv_cache_config c;
    c.n_ctx = 256, c.n_seq_max = n_seq;
    cache = std::move(be->make_cache(c).value());
  }
  std::vector<float> feed(const std::vector<int32_t>& toks, size_t from, size_t to, int32_t seq = 0) {
    batch b;
    for (size_t i = from; i < to; ++i) b.add(toks[i], seq, int32_t(i), i + 1 == to);
    auto s = be->forward(b, *cache, logits);
    EXPECT_TRUE(s.ok()) << s.message();
    return logits;
  }
};

class cpu_moe : public ::testing::TestWithParam<std::string> {};

TEST_P(cpu_moe, prefill_equals_token_by_token_decode) {
  auto m = moe_model(GetParam());
  ASSERT_TRUE(m);
  const auto toks = tokens(24, m->desc.hp.n_vocab);
  runner whole(m->desc), steps(m->desc);
  const auto a = whole.feed(toks, 0, toks.size());
  std::vector<float> b;
  for (size_t i = 0; i < toks.size(); ++i) b = steps.feed(toks, i, i + 1);
  ASSERT_EQ(a.size(), b.size());
  for (float v : a) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LT(max_rel_diff(a, b), 1e-4f);
}

TEST_P(cpu_moe, sequences_in_one_batch_are_independent) {
  auto m = moe_model(GetParam(), ggml_type::q8_0);
  ASSERT_TRUE(m);
  const auto t0 = tokens(9, m->desc.hp.n_vocab);
  auto t1 = t0;
  std::reverse(t1.begin(), t1.end());
  runner alone0(m->desc), alone1(m->desc), both(m->desc);
  const auto a0 = alone0.feed(t0, 0, t0.size(), 0);
  const auto a1 = alone1.feed(t1, 0, t1.size(), 1);
  batch b;
  for (size_t i = 0; i < t0.size(); ++i) b.add(t0[i], 0, int32_t(i), i + 1 == t0.size());
  for (size_t i = 0; i < t1.size(); ++i) b.add(t1[i], 1, int32_t(i), i + 1 == t1.size());
  std::vector<float> logits;
  ASSERT_TRUE(both.be->forward(b, *both.cache, logits).ok());
  const size_t V = m->desc.hp.n_vocab;
  ASSERT_EQ(logits.size(), 2 * V);
  EXPECT_LT(max_rel_diff(a0, std::vector<float>(logits.begin(), logits.begin() + V)), 1e-4f);
  EXPECT_LT(max_rel_diff(a1, std::vector<float>(logits.begin() + V, logits.end())), 1e-4f);
}

TEST_P(cpu_moe, more_experts_per_token_change_the_result) {
  auto k2 = moe_model(GetParam(), ggml_type::f32, 2), k3 = moe_model(GetParam(), ggml_type::f32, 3);
  ASSERT_TRUE(k2 && k3);
  const auto toks = tokens(6, k2->desc.hp.n_vocab);
  runner r2(k2->desc), r3(k3->desc);
  EXPECT_GT(max_rel_diff(r2.feed(toks, 0, toks.size()), r3.feed(toks, 0, toks.size())), 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(archs, cpu_moe, ::testing::Values("qwen3moe", "qwen35moe"));

}  // namespace
}  // namespace tandem
