// The CUDA backend against the CPU reference backend on tiny random models (llama, qwen2, qwen3;
// several weight types): logits of prefill, decode and mixed batches, and 64 greedy tokens.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

using param = std::tuple<std::string, ggml_type>;

struct pair_fixture {
  std::unique_ptr<test::tiny_model> model;
  std::unique_ptr<backend> cpu;
  std::unique_ptr<cuda_backend_api> gpu;
  std::unique_ptr<kv_cache> cpu_cache, gpu_cache;
};

pair_fixture make_pair(const std::string& arch, ggml_type t, ggml_type cache_type = ggml_type::f16) {
  pair_fixture f;
  test::tiny_model_options opt;
  opt.arch = arch;
  opt.matrix_type = t;
  opt.seed = 3;
  // Rows of 256 so that every block type fits; head_dim 64 as the kernels support.
  opt.hp.n_embd = 256;
  opt.hp.n_ff = 512;
  opt.hp.n_head = 4;
  opt.hp.n_head_kv = 2;
  opt.hp.head_dim = 64;
  opt.hp.rope_dim = 64;
  opt.hp.n_vocab = 96;
  opt.hp.tied_output = arch == "qwen2";
  auto m = test::make_tiny_model(opt);
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.message());
  if (!m) return f;
  f.model = std::move(*m);
  auto cpu = make_cpu_backend(f.model->desc, {2});
  auto gpu = make_cuda_backend(f.model->desc);
  EXPECT_TRUE(cpu.ok() && gpu.ok()) << (gpu.ok() ? "" : gpu.message());
  if (!cpu || !gpu) return f;
  f.cpu = std::move(*cpu);
  f.gpu = std::move(*gpu);
  kv_cache_config cfg;
  cfg.n_ctx = 160;
  cfg.n_seq_max = 2;
  cfg.type = cache_type;
  auto cc = f.cpu->make_cache(cfg);
  auto gc = f.gpu->make_cache(cfg);
  EXPECT_TRUE(cc.ok() && gc.ok()) << (gc.ok() ? "" : gc.message());
  if (!cc || !gc) return f;
  f.cpu_cache = std::move(*cc);
  f.gpu_cache = std::move(*gc);
  return f;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) num += (a[i] - ref[i]) * double(a[i] - ref[i]), den += ref[i] * double(ref[i]);
  return std::sqrt(num / std::max(den, 1e-30));
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

// Runs the batch on both backends; expects equal shapes and ‖gpu − cpu‖/‖cpu‖ ≤ tol.
void expect_same_logits(pair_fixture& f, const batch& b, double tol, const char* what) {
  std::vector<float> lc, lg;
  auto sc = f.cpu->forward(b, *f.cpu_cache, lc);
  auto sg = f.gpu->forward(b, *f.gpu_cache, lg);
  ASSERT_TRUE(sc.ok()) << sc.message();
  ASSERT_TRUE(sg.ok()) << sg.message();
  ASSERT_EQ(lc.size(), lg.size());
  const double e = rel_err(lg, lc);
  EXPECT_LE(e, tol) << what;
  for (float v : lg) ASSERT_TRUE(std::isfinite(v)) << what;
}

class cuda_vs_cpu : public ::testing::TestWithParam<param> {};

// Tolerances: batches of ≤ 8 tokens run float32 mat-vecs over the same f16 KV cache as the CPU,
// so only summation order differs (1e-4 relative). Larger batches use fp16 activations in
// cuBLAS GEMMs and fp16 attention probabilities: about 1e-3 per layer, bounded here by 1e-2.
TEST_P(cuda_vs_cpu, logits_match) {
  REQUIRE_GPU();
  auto f = make_pair(std::get<0>(GetParam()), std::get<1>(GetParam()));
  ASSERT_TRUE(f.gpu_cache && f.cpu_cache);
  const int32_t V = int32_t(f.model->desc.hp.n_vocab);
  const auto toks = random_tokens(60, 5, V);
  batch b;
  for (int i = 0; i < 6; ++i) b.add(toks[i], 0, i, true);
  expect_same_logits(f, b, 1e-4, "short prompt (mat-vec path)");
  for (int i = 6; i < 9; ++i) {
    b.clear();
    b.add(toks[i], 0, i, true);
    expect_same_logits(f, b, 1e-4, "decode step");
  }
  // A 40-token chunk of sequence 0 (GEMM + cuBLAS attention) and a 5-token prompt of sequence 1.
  b.clear();
  for (int i = 9; i < 49; ++i) b.add(toks[i], 0, i, true);
  for (int i = 0; i < 5; ++i) b.add(toks[50 + i], 1, i, i == 4);
  expect_same_logits(f, b, 1e-2, "mixed prefill batch");
  b.clear();
  b.add(toks[49], 0, 49, true);
  b.add(toks[55], 1, 5, true);
  expect_same_logits(f, b, 1e-2, "two-sequence decode");
}

// Greedy decoding from a short prompt stays on the float32 mat-vec path: the 64 tokens must be
// the CPU's exactly, with the GPU argmax (forward_argmax) choosing.
TEST_P(cuda_vs_cpu, greedy_64_tokens_identical) {
  REQUIRE_GPU();
  auto f = make_pair(std::get<0>(GetParam()), std::get<1>(GetParam()));
  ASSERT_TRUE(f.gpu_cache && f.cpu_cache);
  const int32_t V = int32_t(f.model->desc.hp.n_vocab);
  const auto prompt = random_tokens(5, 9, V);
  std::vector<int32_t> out_cpu, out_gpu;
  for (int side = 0; side < 2; ++side) {
    batch b;
    for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], 0, int32_t(i), i + 1 == prompt.size());
    auto& out = side == 0 ? out_cpu : out_gpu;
    for (int step = 0; step < 64; ++step) {
      int32_t next = 0;
      if (side == 0) {
        std::vector<float> l;
        auto s = f.cpu->forward(b, *f.cpu_cache, l);
        ASSERT_TRUE(s.ok()) << s.message();
        next = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
      } else {
        std::vector<int32_t> ids;
        auto s = f.gpu->forward_argmax(b, *f.gpu_cache, ids);
        ASSERT_TRUE(s.ok()) << s.message();
        ASSERT_EQ(ids.size(), 1u);
        next = ids[0];
      }
      out.push_back(next);
      const int32_t pos = int32_t(prompt.size()) + step;
      b.clear();
      b.add(next, 0, pos, true);
    }
  }
  EXPECT_EQ(out_cpu, out_gpu);
}

INSTANTIATE_TEST_SUITE_P(
    all, cuda_vs_cpu,
    ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3"),
                       ::testing::Values(ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0,
                                         ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::string(type_name(std::get<1>(info.param)));
    });

TEST(cuda_backend, f32_cache_and_errors) {
  REQUIRE_GPU();
  auto f = make_pair("qwen3", ggml_type::q8_0, ggml_type::f32);
  ASSERT_TRUE(f.gpu_cache && f.cpu_cache);
  batch b;
  for (int i = 0; i < 20; ++i) b.add(i % 96, 0, i, i >= 18);
  expect_same_logits(f, b, 1e-2, "f32 cache prefill");
  b.clear();
  b.add(3, 0, 20, true);
  expect_same_logits(f, b, 1e-2, "f32 cache decode");

  std::vector<float> l;
  b.clear();
  b.add(96, 0, 21, true);  // outside the vocabulary
  EXPECT_FALSE(f.gpu->forward(b, *f.gpu_cache, l).ok());
  b.clear();
  b.add(1, 0, 21, true);
  EXPECT_FALSE(f.gpu->forward(b, *f.cpu_cache, l).ok());  // another backend's cache
  kv_cache_config cfg;
  cfg.type = ggml_type::q8_0;
  EXPECT_FALSE(f.gpu->make_cache(cfg).ok());
  EXPECT_GT(f.gpu->weight_bytes_per_token(), 0u);
  EXPECT_GT(f.gpu->load_stats().bytes, 0u);
}

}  // namespace
}  // namespace tandem
