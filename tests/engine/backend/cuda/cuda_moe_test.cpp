// The CUDA backend on tiny mixture-of-experts models (qwen3moe; qwen35moe with its DeltaNet layers
// and shared expert) against the CPU reference: decode-sized steps (the expert mat-vec over each
// token's selected experts, graphs), a prefill through the grouped GEMM, and the refusal to split.
// GPU tests skip without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "tiny_model.h"

namespace tandem {
namespace {

#define REQUIRE_GPU() \
  if (cuda_backend_device_count() == 0) GTEST_SKIP() << "no CUDA device"

struct moe_pair {
  std::unique_ptr<test::tiny_model> model;
  std::unique_ptr<backend> cpu;
  std::unique_ptr<cuda_backend_api> gpu;
  std::unique_ptr<kv_cache> cpu_cache, gpu_cache;
};

moe_pair make_moe_pair(const std::string& arch, ggml_type t) {
  moe_pair f;
  test::tiny_model_options opt;
  opt.arch = arch;
  opt.hp = arch == "qwen3moe" ? test::tiny_model_options::qwen3moe_hparams()
                              : test::tiny_model_options::qwen35moe_hparams();
  opt.matrix_type = t;
  opt.seed = 11;
  auto m = test::make_tiny_model(opt);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.message());
  if (!m) return f;
  f.model = std::move(*m);
  auto cpu = make_cpu_backend(f.model->desc, {2});
  auto gpu = make_cuda_backend(f.model->desc, cuda_backend_options{});
  EXPECT_TRUE(cpu.ok()) << (cpu.ok() ? "" : cpu.message());
  EXPECT_TRUE(gpu.ok()) << (gpu.ok() ? "" : gpu.message());
  if (!cpu || !gpu) return f;
  f.cpu = std::move(*cpu);
  f.gpu = std::move(*gpu);
  kv_cache_config cfg;
  cfg.n_ctx = 128;
  cfg.n_seq_max = 2;
  auto cc = f.cpu->make_cache(cfg);
  auto gc = f.gpu->make_cache(cfg);
  EXPECT_TRUE(cc.ok() && gc.ok());
  if (!cc || !gc) return f;
  f.cpu_cache = std::move(*cc);
  f.gpu_cache = std::move(*gc);
  return f;
}

double rel_err(const float* a, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) num += (a[i] - ref[i]) * double(a[i] - ref[i]), den += ref[i] * double(ref[i]);
  return std::sqrt(num / std::max(den, 1e-30));
}

// Runs the batch on both backends; expects every logits row within tol (‖gpu − cpu‖/‖cpu‖).
void expect_same_logits(moe_pair& f, const batch& b, double tol, const std::string& what) {
  std::vector<float> lc, lg;
  auto sc = f.cpu->forward(b, *f.cpu_cache, lc);
  auto sg = f.gpu->forward(b, *f.gpu_cache, lg);
  ASSERT_TRUE(sc.ok()) << what << ": CPU: " << sc.message();
  ASSERT_TRUE(sg.ok()) << what << ": GPU: " << sg.message();
  ASSERT_EQ(lc.size(), lg.size()) << what;
  const size_t V = f.model->desc.hp.n_vocab;
  double worst = 0;
  for (size_t r = 0; r * V < lc.size(); ++r) worst = std::max(worst, rel_err(lg.data() + r * V, lc.data() + r * V, V));
  std::printf("  worst row rel err %.3g (tol %.3g): %s\n", worst, tol, what.c_str());
  EXPECT_LE(worst, tol) << what;
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

using param = std::tuple<std::string, ggml_type>;
class cuda_vs_cpu_moe : public ::testing::TestWithParam<param> {};

// Two sequences in steps of at most 8 tokens (the expert mat-vec; graphs replay the decode steps):
// F32 weights read x as floats, so only summation order differs from the CPU (1e-4 as the dense
// models' float path; 1e-3 with the DeltaNet recurrence); quantized weights add the mat-vec's
// int8 copy of x (3e-2, as cuda_backend_test.cpp's k_int8_logit_tol).
TEST_P(cuda_vs_cpu_moe, decode_steps_match_cpu) {
  REQUIRE_GPU();
  const auto [arch, wt] = GetParam();
  auto f = make_moe_pair(arch, wt);
  ASSERT_TRUE(f.gpu_cache && f.cpu_cache);
  const double tol = wt == ggml_type::f32 ? 1e-3 : 3e-2;
  const auto toks = random_tokens(64, 3, int32_t(f.model->desc.hp.n_vocab));
  batch b;
  int32_t p0 = 0, p1 = 0;
  for (int i = 0; i < 6; ++i) b.add(toks[i], 0, p0++, true);
  b.add(toks[6], 1, p1++, true), b.add(toks[7], 1, p1++, true);
  expect_same_logits(f, b, tol, arch + " 6 + 2 token step");
  for (int step = 0; step < 10; ++step) {
    b.clear();
    b.add(toks[10 + step], 0, p0++, true);
    b.add(toks[30 + step], 1, p1++, true);
    expect_same_logits(f, b, tol, arch + " decode step " + std::to_string(step));
  }
}

// A 40 + 6 token prefill (the device grouping and grouped GEMM, fp16 operands: 1e-2 as the dense
// prefill; a routing choice that the fp16 error flipped would show as a row far off), then decode.
TEST_P(cuda_vs_cpu_moe, grouped_gemm_prefill_matches_cpu) {
  REQUIRE_GPU();
  const auto [arch, wt] = GetParam();
  auto f = make_moe_pair(arch, wt);
  ASSERT_TRUE(f.gpu_cache && f.cpu_cache);
  const auto toks = random_tokens(64, 9, int32_t(f.model->desc.hp.n_vocab));
  batch b;
  for (int i = 0; i < 40; ++i) b.add(toks[i], 0, i, true);
  for (int i = 0; i < 6; ++i) b.add(toks[40 + i], 1, i, true);
  expect_same_logits(f, b, 2e-2, arch + " prefill");
  b.clear();
  b.add(toks[50], 0, 40, true);
  b.add(toks[51], 1, 6, true);
  expect_same_logits(f, b, 3e-2, arch + " decode after the prefill");
}

INSTANTIATE_TEST_SUITE_P(all, cuda_vs_cpu_moe,
                         ::testing::Combine(::testing::Values("qwen3moe", "qwen35moe"),
                                            ::testing::Values(ggml_type::f32, ggml_type::f16, ggml_type::q8_0)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::string(type_name(std::get<1>(info.param)));
                         });

// Splitting a MoE model over devices is refused with a clear error, not computed wrong.
TEST(cuda_moe, split_is_refused) {
  REQUIRE_GPU();
  test::tiny_model_options opt;
  opt.arch = "qwen3moe";
  opt.hp = test::tiny_model_options::qwen3moe_hparams();
  auto m = test::make_tiny_model(opt);
  ASSERT_TRUE(m.ok()) << m.message();
  cuda_backend_options o;
  o.devices = {0, 0};
  o.layers_per_device = {1, 1};
  auto gpu = make_cuda_backend((*m)->desc, o);
  ASSERT_FALSE(gpu.ok());
  EXPECT_NE(gpu.message().find("mixture of experts"), std::string::npos) << gpu.message();
}

}  // namespace
}  // namespace tandem
