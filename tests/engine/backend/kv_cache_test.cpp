// KV cache bookkeeping: block allocation, truncation, the context limit and batch validation;
// and the backend interface's default forward_argmax (the host pick a CPU backend uses).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/backend.h"

namespace tandem {
namespace {

class host_cache final : public kv_cache {
 public:
  using kv_cache::kv_cache;
  uint64_t bytes() const override { return 0; }
};

TEST(kv_cache, blocks_are_allocated_and_returned) {
  kv_cache_config cfg;
  cfg.n_ctx = 40;
  cfg.n_seq_max = 2;
  cfg.block_size = 16;
  auto c = normalize_kv_config(cfg);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->n_blocks, 6u);  // 3 per sequence
  host_cache kc(*c);
  ASSERT_TRUE(kc.grow(0, 17).ok());
  EXPECT_EQ(kc.length(0), 17u);
  EXPECT_EQ(kc.free_blocks(), 4u);
  ASSERT_TRUE(kc.grow(1, 5).ok());
  // Slots of different sequences never collide.
  EXPECT_NE(kc.slot(0, 0), kc.slot(1, 0));
  EXPECT_EQ(kc.slot(0, 16) % 16, 0u);
  EXPECT_NE(kc.slot(0, 16) / 16, kc.slot(0, 0) / 16);
  kc.truncate(0, 3);
  EXPECT_EQ(kc.length(0), 3u);
  EXPECT_EQ(kc.free_blocks(), 4u);
  kc.clear_all();
  EXPECT_EQ(kc.free_blocks(), 6u);
}

TEST(kv_cache, context_limit_and_pool_exhaustion_are_errors) {
  kv_cache_config cfg;
  cfg.n_ctx = 32;
  cfg.n_seq_max = 2;
  cfg.block_size = 8;
  cfg.n_blocks = 5;
  host_cache kc(*normalize_kv_config(cfg));
  auto s = kc.grow(0, 33);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("context limit"), std::string::npos);
  EXPECT_EQ(kc.length(0), 0u);
  ASSERT_TRUE(kc.grow(0, 32).ok());
  auto s2 = kc.grow(1, 9);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.message().find("KV cache is full"), std::string::npos);
  EXPECT_EQ(kc.length(1), 0u);
  EXPECT_FALSE(kc.grow(2, 1).ok());
}

TEST(kv_cache, bad_configs_are_refused) {
  kv_cache_config cfg;
  cfg.type = ggml_type::q4_k;
  EXPECT_FALSE(normalize_kv_config(cfg).ok());
  cfg.type = ggml_type::q8_0;
  cfg.n_ctx = 0;
  EXPECT_FALSE(normalize_kv_config(cfg).ok());
}

TEST(kv_cache, batch_validation) {
  kv_cache_config cfg;
  cfg.n_ctx = 8;
  cfg.n_seq_max = 2;
  host_cache kc(*normalize_kv_config(cfg));
  batch b;
  b.add(1, 0, 0, false);
  b.add(2, 1, 0, false);
  b.add(3, 0, 1, true);
  EXPECT_TRUE(validate_batch(b, kc, 10).ok());
  ASSERT_TRUE(reserve_batch(b, kc, 10).ok());
  EXPECT_EQ(kc.length(0), 2u);
  EXPECT_EQ(kc.length(1), 1u);

  batch gap;
  gap.add(1, 0, 3, true);  // sequence 0 is at 2
  auto s = validate_batch(gap, kc, 10);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expects position 2, got 3"), std::string::npos) << s.message();

  batch bad_tok;
  bad_tok.add(10, 0, 2, true);
  EXPECT_FALSE(validate_batch(bad_tok, kc, 10).ok());

  batch too_long;
  for (int p = 1; p < 9; ++p) too_long.add(1, 1, p, false);
  auto s2 = reserve_batch(too_long, kc, 10);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.message().find("context limit"), std::string::npos);
  EXPECT_EQ(kc.length(1), 1u);
}

// forward() hands out fixed rows, one per wanted token in turn; forward_argmax is the default.
class fixed_logits_backend final : public backend {
 public:
  explicit fixed_logits_backend(std::vector<std::vector<float>> rows) : rows_(std::move(rows)) {
    desc_.hp.n_vocab = uint32_t(rows_.front().size());
  }
  std::string_view name() const override { return "fixed"; }
  const model_desc& model() const override { return desc_; }
  result<std::unique_ptr<kv_cache>> make_cache(const kv_cache_config&) override {
    return make_error("fixed backend makes no cache");
  }
  status forward(const batch& b, kv_cache& cache, std::vector<float>& logits) override {
    ++forwards;
    TANDEM_TRY(reserve_batch(b, cache, n_vocab()));
    logits.clear();
    size_t r = 0;
    for (auto want : b.want_logits)
      if (want) {
        const auto& row = rows_[r++ % rows_.size()];
        logits.insert(logits.end(), row.begin(), row.end());
      }
    return {};
  }
  int forwards = 0;

 private:
  std::vector<std::vector<float>> rows_;
  model_desc desc_;
};

TEST(backend, default_forward_argmax_takes_each_rows_greedy_pick) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  fixed_logits_backend be({
      {1.f, 3.f, 3.f, 0.f, 2.f},        // equal maxima: the lowest id, as the greedy sampler picks
      {nan, 1.f, 2.f, 2.f, -inf},       // NaN never wins (the CUDA kernel skips it too)
      {-inf, -inf, -inf, -inf, -inf},   // nothing above -FLT_MAX: 0, as the kernel answers
      {0.f, 0.f, 0.f, 0.f, 7.f},        // the last id
      {-5.f, -4.f, inf, inf, -1.f},     // +inf ties like any other value
  });
  kv_cache_config cfg;
  cfg.n_ctx = 8;
  cfg.n_seq_max = 2;
  host_cache kc(*normalize_kv_config(cfg));
  batch b;  // two sequences interleaved, five of six tokens wanting logits
  b.add(1, 0, 0, true);
  b.add(2, 1, 0, false);
  b.add(3, 1, 1, true);
  b.add(4, 0, 1, true);
  b.add(0, 1, 2, true);
  b.add(1, 0, 2, true);
  std::vector<int32_t> ids = {99};
  ASSERT_TRUE(be.forward_argmax(b, kc, ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 0, 4, 2}));
  EXPECT_EQ(be.forwards, 1);
  EXPECT_EQ(kc.length(0), 3u);  // the pass ran: the cache grew

  batch no_rows;  // a prefill chunk wanting no logits gives no ids
  no_rows.add(1, 0, 3, false);
  ASSERT_TRUE(be.forward_argmax(no_rows, kc, ids).ok());
  EXPECT_TRUE(ids.empty());

  batch bad;  // forward's error comes through, the cache unchanged
  bad.add(5, 0, 4, true);
  auto s = be.forward_argmax(bad, kc, ids);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s.message();
  EXPECT_EQ(kc.length(0), 4u);

  EXPECT_EQ(argmax_logits({}), 0);
  EXPECT_EQ(argmax_logits(std::vector<float>{-2.f, -1.f, -1.f}), 1);
}

}  // namespace
}  // namespace tandem
