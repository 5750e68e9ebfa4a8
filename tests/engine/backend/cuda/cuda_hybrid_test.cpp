// The CUDA backend on a tiny qwen35 (3 Gated DeltaNet layers + 1 gated attention layer) against the
// CPU reference: logits of a two-sequence prefill and decode (each sequence a DeltaNet run), with
// f16 and q8_0 KV caches; the recurrent state's checkpoint / truncate round trip; graph replays;
// the cache's sizes; and the refusal to split a hybrid model. GPU tests skip without a device.
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

test::tiny_model_options qwen35_options(ggml_type matrix_type, uint64_t seed) {
  test::tiny_model_options opt;
  opt.arch = "qwen35";
  opt.hp = test::tiny_model_options::qwen35_hparams();
  opt.matrix_type = matrix_type;
  opt.seed = seed;
  return opt;
}

struct pair_fixture {
  std::unique_ptr<test::tiny_model> model;
  std::unique_ptr<backend> cpu;
  std::unique_ptr<cuda_backend_api> gpu;
  std::unique_ptr<kv_cache> cpu_cache, gpu_cache;
};

pair_fixture make_pair(ggml_type t, ggml_type cache_type, bool graphs = true) {
  pair_fixture f;
  auto m = test::make_tiny_model(qwen35_options(t, 7));
  EXPECT_TRUE(m.ok()) << (m.ok() ? "" : m.message());
  if (!m) return f;
  f.model = std::move(*m);
  auto cpu = make_cpu_backend(f.model->desc, {2});
  cuda_backend_options opt;
  opt.graphs = graphs;
  auto gpu = make_cuda_backend(f.model->desc, opt);
  EXPECT_TRUE(cpu.ok()) << (cpu.ok() ? "" : cpu.message());
  EXPECT_TRUE(gpu.ok()) << (gpu.ok() ? "" : gpu.message());
  if (!cpu || !gpu) return f;
  f.cpu = std::move(*cpu);
  f.gpu = std::move(*gpu);
  kv_cache_config cfg;
  cfg.n_ctx = 128;
  cfg.n_seq_max = 2;
  cfg.type = cache_type;
  auto cc = f.cpu->make_cache(cfg);
  auto gc = f.gpu->make_cache(cfg);
  EXPECT_TRUE(cc.ok()) << (cc.ok() ? "" : cc.message());
  EXPECT_TRUE(gc.ok()) << (gc.ok() ? "" : gc.message());
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

// The worst row of the batch: ‖gpu − cpu‖/‖cpu‖ per logits row, so one bad sequence shows.
double worst_row_err(const std::vector<float>& g, const std::vector<float>& c, size_t n_vocab, size_t* row) {
  double worst = 0;
  for (size_t r = 0; r * n_vocab < c.size(); ++r) {
    const std::vector<float> gr(g.begin() + r * n_vocab, g.begin() + (r + 1) * n_vocab);
    const std::vector<float> cr(c.begin() + r * n_vocab, c.begin() + (r + 1) * n_vocab);
    const double e = rel_err(gr, cr);
    if (e > worst) worst = e, *row = r;
  }
  return worst;
}

// Runs the batch on both backends; expects ‖gpu − cpu‖/‖cpu‖ ≤ tol overall and per row, and the
// recurrent state of every sequence of the batch recorded as holding all its tokens.
void expect_same_logits(pair_fixture& f, const batch& b, double tol, const std::string& what,
                        std::vector<float>* gpu_logits = nullptr) {
  std::vector<float> lc, lg;
  auto sc = f.cpu->forward(b, *f.cpu_cache, lc);
  auto sg = f.gpu->forward(b, *f.gpu_cache, lg);
  ASSERT_TRUE(sc.ok()) << what << ": CPU: " << sc.message();
  ASSERT_TRUE(sg.ok()) << what << ": GPU: " << sg.message();
  ASSERT_EQ(lc.size(), lg.size()) << what;
  size_t row = 0;
  const double e = rel_err(lg, lc), worst = worst_row_err(lg, lc, f.model->desc.hp.n_vocab, &row);
  std::printf("  rel err %.3g, worst row %zu %.3g (tol %.3g): %s\n", e, row, worst, tol, what.c_str());
  EXPECT_LE(e, tol) << what;
  EXPECT_LE(worst, 2 * tol) << what << ": logits row " << row;
  for (float v : lg) ASSERT_TRUE(std::isfinite(v)) << what;
  for (int32_t seq : b.seq_ids)
    EXPECT_EQ(f.gpu_cache->state_length(seq), f.gpu_cache->length(seq)) << what << ": sequence " << seq;
  if (gpu_logits) *gpu_logits = std::move(lg);
}

// Decode after a GEMM prefill: the KV cache and the recurrent state carry the prefill's fp16
// GEMM error (1e-2, as cuda_backend_test.cpp bounds it); quantized weights add the mat-vec's int8
// copy of x (its k_int8_logit_tol, 3e-2).
double decode_tol(ggml_type w) { return w == ggml_type::f32 || w == ggml_type::f16 ? 1e-2 : 3e-2; }

using param = std::tuple<ggml_type, ggml_type>;  // weights, KV cache
class cuda_vs_cpu_qwen35 : public ::testing::TestWithParam<param> {};

// A 40-token prefill of sequence 0 and a 6-token prompt of sequence 1 in one batch (GEMM path,
// two DeltaNet runs; the flash-attention kernel for sequence 0), then 8 decode steps of both
// sequences together (mat-vec path, graphs, two one-token runs), then a 3 + 1 token step (runs of
// several tokens on the mat-vec path). fp16 GEMM activations bound the prefill by 1e-2.
TEST_P(cuda_vs_cpu_qwen35, prefill_and_decode_two_sequences) {
  REQUIRE_GPU();
  const auto [wt, kv] = GetParam();
  auto f = make_pair(wt, kv);
  std::printf("  weights %s, KV cache %s\n", std::string(type_name(wt)).c_str(), std::string(type_name(kv)).c_str());
  ASSERT_TRUE(f.gpu_cache && f.cpu_cache);
  const int32_t V = int32_t(f.model->desc.hp.n_vocab);
  const auto toks = random_tokens(80, 5, V);
  batch b;
  for (int i = 0; i < 40; ++i) b.add(toks[i], 0, i, true);
  for (int i = 0; i < 6; ++i) b.add(toks[40 + i], 1, i, true);
  expect_same_logits(f, b, 1e-2, "two-sequence prefill");
  int32_t p0 = 40, p1 = 6;
  for (int step = 0; step < 8; ++step) {
    b.clear();
    b.add(toks[50 + step], 0, p0++, true);
    b.add(toks[60 + step], 1, p1++, true);
    expect_same_logits(f, b, decode_tol(wt), "decode step " + std::to_string(step));
  }
  b.clear();
  for (int i = 0; i < 3; ++i) b.add(toks[70 + i], 0, p0++, true);
  b.add(toks[75], 1, p1++, true);
  expect_same_logits(f, b, decode_tol(wt), "3 + 1 token step");
}

INSTANTIATE_TEST_SUITE_P(all, cuda_vs_cpu_qwen35,
                         ::testing::Combine(::testing::Values(ggml_type::f32, ggml_type::f16, ggml_type::q8_0),
                                            ::testing::Values(ggml_type::f16, ggml_type::q8_0)),
                         [](const auto& info) {
                           return std::string(type_name(std::get<0>(info.param))) + "_kv_" +
                                  std::string(type_name(std::get<1>(info.param)));
                         });

// Checkpoint after a prefill, decode 5 tokens, truncate back to the checkpoint (the state is
// restored, the length kept), decode the same 5 again: the GPU repeats its logits and matches the
// CPU. A truncate to any other length drops the whole sequence, which then prefills anew. F32
// weights and a prefill in chunks of at most 8 tokens (DeltaNet runs that continue a state) keep
// everything on the float mat-vec path: only summation order differs from the CPU (1e-4 for
// attention models; 1e-3 allowed for the recurrence).
TEST(cuda_qwen35, checkpoint_truncate_round_trip) {
  REQUIRE_GPU();
  auto f = make_pair(ggml_type::f32, ggml_type::f16);
  ASSERT_TRUE(f.gpu_cache && f.cpu_cache);
  const int32_t V = int32_t(f.model->desc.hp.n_vocab);
  const auto toks = random_tokens(40, 13, V);
  batch b;
  for (int c0 = 0; c0 < 20; c0 += 8) {
    b.clear();
    for (int i = c0; i < std::min(c0 + 8, 20); ++i) b.add(toks[i], 0, i, true);
    expect_same_logits(f, b, 1e-3, "prefill chunk at " + std::to_string(c0));
  }
  const auto sg = f.gpu_cache->checkpoint(0);
  ASSERT_TRUE(sg.ok()) << sg.message();
  const auto sc = f.cpu_cache->checkpoint(0);
  ASSERT_TRUE(sc.ok()) << sc.message();
  EXPECT_EQ(f.gpu_cache->checkpoint_length(0), 20u);
  std::vector<std::vector<float>> first(5);
  for (int i = 0; i < 5; ++i) {
    b.clear();
    b.add(toks[20 + i], 0, 20 + i, true);
    expect_same_logits(f, b, 1e-3, "decode after the checkpoint " + std::to_string(i), &first[i]);
  }
  ASSERT_EQ(f.gpu_cache->truncate(0, 20), 20u);
  ASSERT_EQ(f.cpu_cache->truncate(0, 20), 20u);
  EXPECT_EQ(f.gpu_cache->state_length(0), 20u);
  for (int i = 0; i < 5; ++i) {
    b.clear();
    b.add(toks[20 + i], 0, 20 + i, true);
    std::vector<float> again;
    expect_same_logits(f, b, 1e-3, "decode after the restore " + std::to_string(i), &again);
    ASSERT_EQ(again.size(), first[i].size());
    EXPECT_LE(rel_err(again, first[i]), 1e-6) << "step " << i << " after the restore differs from before";
  }
  // Not the checkpoint: the sequence is dropped (its state cannot be rewound) and prefills again.
  EXPECT_EQ(f.gpu_cache->truncate(0, 22), 0u);
  EXPECT_EQ(f.cpu_cache->truncate(0, 22), 0u);
  EXPECT_EQ(f.gpu_cache->length(0), 0u);
  b.clear();
  for (int i = 0; i < 12; ++i) b.add(toks[i], 0, i, true);
  expect_same_logits(f, b, 1e-2, "prefill after the drop");
}

// Decode steps replayed from graphs (the DeltaNet runs read from the step's device upload) give
// the logits of the same steps launched kernel by kernel, including when a sequence joins.
TEST(cuda_qwen35, graph_replay_matches_eager) {
  REQUIRE_GPU();
  auto eager = make_pair(ggml_type::q8_0, ggml_type::f16, false);
  auto graphed = make_pair(ggml_type::q8_0, ggml_type::f16, true);
  ASSERT_TRUE(eager.gpu_cache && graphed.gpu_cache);
  std::mt19937 rng(4);
  for (int step = 0; step < 60; ++step) {
    batch b;
    b.add(int32_t(rng() % 96), 0, step, true);
    if (step >= 30) b.add(int32_t(rng() % 96), 1, step - 30, true);
    std::vector<float> a, g;
    ASSERT_TRUE(eager.gpu->forward(b, *eager.gpu_cache, a).ok());
    ASSERT_TRUE(graphed.gpu->forward(b, *graphed.gpu_cache, g).ok());
    ASSERT_EQ(a.size(), g.size());
    EXPECT_LE(rel_err(g, a), 1e-6) << "step " << step;
  }
  EXPECT_EQ(eager.gpu->graph_replays(), 0u);
  EXPECT_GT(graphed.gpu->graph_replays(), 40u);
}

// K/V only for the attention layer, plus each DeltaNet layer's state and its checkpoint.
TEST(cuda_qwen35, cache_sizes_and_state_bytes) {
  REQUIRE_GPU();
  auto f = make_pair(ggml_type::f16, ggml_type::q8_0);
  ASSERT_TRUE(f.gpu_cache);
  const hparams& hp = f.model->desc.hp;
  const delta_net_shape dn = delta_net_of(hp);
  ASSERT_EQ(hp.n_attention_layers(), 1u);
  const uint64_t kv = 2ull * f.gpu_cache->n_slots() * (hp.n_head_kv * hp.head_dim / 32) * 34;
  const uint64_t per_seq = 3ull * (dn.conv_state_floats() + dn.ssm_state_floats()) * sizeof(float);
  EXPECT_EQ(f.gpu_cache->bytes(), kv + 2 * 2 * per_seq);  // 2 sequences, state + checkpoint
  EXPECT_EQ(f.gpu->state_bytes_per_token(), 2 * per_seq);
  EXPECT_GT(f.gpu->weight_bytes_per_token(), 0u);
}

// Splits of a hybrid model are refused before anything is allocated (no GPU needed).
TEST(cuda_qwen35, refuses_splits) {
  auto m = test::make_tiny_model(qwen35_options(ggml_type::f32, 1));
  ASSERT_TRUE(m.ok()) << m.message();
  cuda_backend_options layer;
  layer.devices = {0, 0};
  layer.layers_per_device = {2, 2};
  auto a = make_cuda_backend((*m)->desc, layer);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("splitting qwen35 (Gated DeltaNet hybrid) over several GPUs is not supported yet"), std::string::npos)
      << a.message();
  cuda_backend_options tensor;
  tensor.devices = {0, 1};
  tensor.tensor_shares = {{0, 1, 0, 48, true}, {1, 2, 48, 96, false}};
  auto t = make_cuda_backend((*m)->desc, tensor);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("not supported yet"), std::string::npos) << t.message();
}

}  // namespace
}  // namespace tandem
