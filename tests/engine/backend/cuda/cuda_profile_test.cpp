// The decode profile: its accounting by label (no GPU needed), and on a GPU a profiled backend
// whose logits are the unprofiled one's bit for bit, with every layer's launch groups counted
// once per layer and a split refused.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_profile.h"
#include "cuda_test_model.h"

namespace tandem {
namespace {

TEST(cuda_profile, sums_by_label_most_time_first) {
  cuda_step_profile p;
  p.add_step({"a", "b", "a"}, {1.f, 5.f, 2.f});
  p.add_step({"a", "b", "a"}, {1.f, 2.f, 2.f});
  const auto rows = p.rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].label, "b");
  EXPECT_EQ(rows[0].calls, 2);
  EXPECT_DOUBLE_EQ(rows[0].ms, 7.0);
  EXPECT_EQ(rows[1].label, "a");
  EXPECT_EQ(rows[1].calls, 4);
  EXPECT_DOUBLE_EQ(rows[1].ms, 6.0);
  EXPECT_EQ(p.steps(), 2);
  p.reset();
  EXPECT_TRUE(p.rows().empty());
  EXPECT_EQ(p.steps(), 0);
}

TEST(cuda_profile, profiled_steps_match_and_count_every_layer) {
  if (cuda_backend_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const uint32_t n_layer = 3;
  auto m = test::make_tiny_model(test::cuda_tiny_options("qwen3", ggml_type::q4_k, 21, n_layer));
  ASSERT_TRUE(m.ok()) << m.message();
  cuda_step_profile profile;
  cuda_backend_options plain_opt, prof_opt;
  prof_opt.profile = &profile;
  auto plain = make_cuda_backend((*m)->desc, plain_opt);
  auto prof = make_cuda_backend((*m)->desc, prof_opt);
  ASSERT_TRUE(plain.ok() && prof.ok());
  kv_cache_config cfg;
  cfg.n_ctx = 64;
  auto c1 = (*plain)->make_cache(cfg), c2 = (*prof)->make_cache(cfg);
  ASSERT_TRUE(c1.ok() && c2.ok());
  std::mt19937 rng(2);
  const int steps = 12;
  for (int step = 0; step < steps; ++step) {
    batch b;
    b.add(int32_t(rng() % 96), 0, step, true);
    std::vector<float> a, g;
    ASSERT_TRUE((*plain)->forward(b, **c1, a).ok());
    ASSERT_TRUE((*prof)->forward(b, **c2, g).ok());
    ASSERT_EQ(a, g) << "step " << step;  // same kernels, only events between them
  }
  EXPECT_EQ(profile.steps(), steps);
  std::map<std::string, cuda_step_profile::row> by;
  for (const auto& r : profile.rows()) by[r.label] = r;
  for (const char* per_layer : {"attention norm", "wq wk wv", "attention", "wo", "FFN norm", "gate up", "down"}) {
    ASSERT_TRUE(by.count(per_layer)) << per_layer;
    EXPECT_EQ(by[per_layer].calls, int64_t(steps) * n_layer) << per_layer;
    EXPECT_GT(by[per_layer].ms, 0.0) << per_layer;
  }
  ASSERT_TRUE(by.count("output head"));
  EXPECT_EQ(by["output head"].calls, steps);
}

TEST(cuda_profile, refuses_a_split) {
  if (cuda_backend_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto m = test::make_tiny_model(test::cuda_tiny_options("qwen3", ggml_type::f32, 3, 2));
  ASSERT_TRUE(m.ok()) << m.message();
  cuda_step_profile profile;
  cuda_backend_options opt;
  opt.profile = &profile;
  opt.devices = {0, 0};
  opt.layers_per_device = {1, 1};
  auto be = make_cuda_backend((*m)->desc, opt);
  ASSERT_FALSE(be.ok());
  EXPECT_NE(be.message().find("one GPU"), std::string::npos) << be.message();
}

}  // namespace
}  // namespace tandem
