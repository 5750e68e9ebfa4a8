// The CPU backend on a tiny random qwen35 (3 DeltaNet layers + 1 gated attention layer): binding
// errors, prefill == token-by-token decode (the chunked and recurrent rule, the conv state),
// sequences that share a batch, and what truncating a recurrent state means.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "tiny_model.h"

namespace tandem {
namespace {

std::unique_ptr<test::tiny_model> qwen35_model(const std::string& skip = {}, const std::string& misshape = {}) {
  test::tiny_model_options o;
  o.arch = "qwen35";
  o.hp = test::tiny_model_options::qwen35_hparams();
  o.skip_tensor = skip;
  o.misshape_tensor = misshape;
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
  // Feeds toks[from, to) of sequence seq; returns the last token's logits.
  std::vector<float> feed(const std::vector<int32_t>& toks, size_t from, size_t to, int32_t seq = 0) {
    batch b;
    for (size_t i = from; i < to; ++i) b.add(toks[i], seq, int32_t(i), i + 1 == to);
    auto s = be->forward(b, *cache, logits);
    EXPECT_TRUE(s.ok()) << s.message();
    return logits;
  }
};

TEST(cpu_hybrid, layer_kinds_and_binding_errors) {
  auto m = qwen35_model();
  ASSERT_TRUE(m);
  const auto& hp = m->desc.hp;
  EXPECT_EQ(hp.kind(0), layer_kind::delta_net);
  EXPECT_EQ(hp.kind(3), layer_kind::attention);
  EXPECT_EQ(hp.n_attention_layers(), 1u);
  EXPECT_NE(m->desc.layers[0].dn_qkv, nullptr);
  EXPECT_EQ(m->desc.layers[0].wq, nullptr);
  EXPECT_NE(m->desc.layers[3].wq, nullptr);
  EXPECT_EQ(m->desc.layers[3].dn_qkv, nullptr);
  EXPECT_NE(m->desc.layers[3].ffn_norm, nullptr);  // post_attention_norm

  test::tiny_model_options o;
  o.arch = "qwen35";
  o.hp = test::tiny_model_options::qwen35_hparams();
  o.skip_tensor = "blk.1.ssm_a";
  auto missing = test::make_tiny_model(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("blk.1.ssm_a"), std::string::npos) << missing.message();
  o.skip_tensor.clear();
  o.misshape_tensor = "blk.2.attn_qkv.weight";
  auto bad = test::make_tiny_model(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("blk.2.attn_qkv.weight"), std::string::npos) << bad.message();
  // Hyper-parameters that contradict each other are refused before any tensor is read.
  o.misshape_tensor.clear();
  o.hp.ssm_dt_rank = 3;  // not a multiple of the 2 key heads
  auto contradict = test::make_tiny_model(o);
  ASSERT_FALSE(contradict.ok());
  EXPECT_NE(contradict.message().find("ssm.time_step_rank"), std::string::npos) << contradict.message();
}

// 90 tokens at once go through the chunked rule (two chunks, one partial); one at a time through
// the recurrent rule and the conv state: the logits agree.
TEST(cpu_hybrid, prefill_equals_token_by_token_decode) {
  auto m = qwen35_model();
  ASSERT_TRUE(m);
  const auto toks = tokens(90, m->desc.hp.n_vocab);
  runner whole(m->desc), steps(m->desc);
  const auto a = whole.feed(toks, 0, toks.size());
  std::vector<float> b;
  for (size_t i = 0; i < toks.size(); ++i) b = steps.feed(toks, i, i + 1);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_LT(max_rel_diff(a, b), 2e-4f);
  // Mixed: a prefill of 70, then 20 single steps.
  runner mixed(m->desc);
  mixed.feed(toks, 0, 70);
  std::vector<float> c;
  for (size_t i = 70; i < toks.size(); ++i) c = mixed.feed(toks, i, i + 1);
  EXPECT_LT(max_rel_diff(a, c), 2e-4f);
}

// Two sequences in one batch (each as its own run of rows) give what each gives alone, and a
// batch that interleaves them is refused (a recurrent state folds its tokens in order).
TEST(cpu_hybrid, sequences_in_one_batch_are_independent) {
  auto m = qwen35_model();
  ASSERT_TRUE(m);
  const auto t0 = tokens(12, m->desc.hp.n_vocab);
  auto t1 = t0;
  std::reverse(t1.begin(), t1.end());
  runner alone0(m->desc), alone1(m->desc), both(m->desc);
  const auto l0 = alone0.feed(t0, 0, 12, 0);
  const auto l1 = alone1.feed(t1, 0, 12, 1);
  batch b;
  for (int i = 0; i < 12; ++i) b.add(t0[i], 0, i, i == 11);
  for (int i = 0; i < 12; ++i) b.add(t1[i], 1, i, i == 11);
  std::vector<float> lg;
  ASSERT_TRUE(both.be->forward(b, *both.cache, lg).ok());
  const size_t V = m->desc.hp.n_vocab;
  EXPECT_LT(max_rel_diff(l0, std::vector<float>(lg.begin(), lg.begin() + V)), 1e-5f);
  EXPECT_LT(max_rel_diff(l1, std::vector<float>(lg.begin() + V, lg.end())), 1e-5f);

  batch mixed;
  mixed.add(t0[0], 0, 12, false);
  mixed.add(t1[0], 1, 12, false);
  mixed.add(t0[1], 0, 13, true);
  auto s = both.be->forward(mixed, *both.cache, lg);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not consecutive"), std::string::npos) << s.message();
  EXPECT_EQ(both.cache->length(0), 12u);  // a refused batch changes nothing
}

// A recurrent state cannot be rewound: truncating into it drops the sequence (0 comes back and the
// caller prefills again) unless the cut is exactly at the checkpoint, which is restored.
TEST(cpu_hybrid, truncation_restores_the_checkpoint_or_drops_the_sequence) {
  auto m = qwen35_model();
  ASSERT_TRUE(m);
  const auto toks = tokens(30, m->desc.hp.n_vocab);
  runner ref(m->desc);
  const auto want = ref.feed(toks, 0, 30);

  runner r(m->desc);
  r.feed(toks, 0, 20);
  ASSERT_TRUE(r.cache->checkpoint(0).ok());
  EXPECT_EQ(r.cache->checkpoint_length(0), 20u);
  r.feed(toks, 20, 26);                 // a first answer
  EXPECT_EQ(r.cache->truncate(0, 20), 20u);  // regenerate: back to the prompt
  EXPECT_LT(max_rel_diff(r.feed(toks, 20, 30), want), 1e-5f);

  EXPECT_EQ(r.cache->truncate(0, 25), 0u);  // no checkpoint at 25: the sequence starts over
  EXPECT_EQ(r.cache->length(0), 0u);
  EXPECT_LT(max_rel_diff(r.feed(toks, 0, 30), want), 1e-5f);
  EXPECT_EQ(r.cache->truncate(0, 30), 30u);  // not shorter: nothing to drop
}

}  // namespace
}  // namespace tandem
