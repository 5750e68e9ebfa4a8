// The CUDA backend's per-step upload (plan_batch), on the host: the layout of its integers, the
// block tables, the runs that take the flash-attention prefill kernel, and the decode step's RoPE rotations.
#include "backend/cuda/cuda_batch_plan.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cpu/ops.h"
#include "kernels/qgemm.h"

namespace tandem {
namespace {

struct host_cache final : kv_cache {
  explicit host_cache(const kv_cache_config& c) : kv_cache(c) {}
  uint64_t bytes() const override { return 0; }
};

kv_cache_config config() {
  kv_cache_config c;
  c.n_ctx = 4096, c.n_seq_max = 4, c.block_size = 16, c.type = ggml_type::f16;
  return *normalize_kv_config(c);
}

hparams qwen_like() {
  hparams hp;
  hp.head_dim = 128, hp.rope_dim = 64, hp.rope_theta = 1e6f;
  return hp;
}

float as_float(int32_t bits) {
  float f = 0.f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Three sequences, one token each, as a decode step: every field where the kernels look for it.
TEST(batch_plan, decode_step_layout_tables_and_rotations) {
  host_cache cache(config());
  const std::vector<int> lengths = {1, 40, 700};
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(cache.grow(s, lengths[s]).ok());
  batch b;
  for (int s = 0; s < 3; ++s) b.add(100 + s, s, lengths[s] - 1, s != 1);
  batch_plan p;
  const hparams hp = qwen_like();
  plan_batch(b, cache, hp, p);
  EXPECT_EQ(p.n_tok, 3);
  EXPECT_EQ(p.n_out, 2);
  EXPECT_EQ(p.n_tables, 3);
  EXPECT_EQ(p.max_blocks, 64);  // 700 / 16 -> 44 blocks, rounded up to k_block_bucket
  EXPECT_TRUE(p.runs.empty());
  EXPECT_TRUE(p.any_paged);
  EXPECT_EQ(p.paged_max_kv, 768);  // 700 rounded up to k_kv_bucket
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(p.ints[p.off_tokens + t], 100 + t);
    EXPECT_EQ(p.ints[p.off_pos + t], lengths[t] - 1);
    EXPECT_EQ(p.ints[p.off_paged + t], lengths[t] - 1);
    EXPECT_EQ(uint32_t(p.ints[p.off_slots + t]), cache.slot(t, lengths[t] - 1));
    EXPECT_EQ(p.ints[p.off_table + t], t);
    for (int k = 0; k * 16 < lengths[t]; ++k)
      EXPECT_EQ(uint32_t(p.ints[p.off_tables + size_t(t) * p.max_blocks + k]), cache.slot(t, k * 16) / 16);
  }
  EXPECT_EQ(p.ints[p.off_out + 0], 0);
  EXPECT_EQ(p.ints[p.off_out + 1], 2);
  // The rotations: after everything else, 8-byte aligned, bit for bit rope_rotations.
  ASSERT_GT(p.off_rot, 0u);
  EXPECT_EQ(p.off_rot % 2, 0u);
  EXPECT_GE(p.off_rot, p.off_tables + size_t(p.n_tables) * p.max_blocks);
  ASSERT_EQ(p.ints.size(), p.off_rot + 3 * size_t(hp.rope_dim));
  std::vector<float> want(hp.rope_dim);
  for (int t = 0; t < 3; ++t) {
    rope_rotations(lengths[t] - 1, int(hp.rope_dim), hp.rope_theta, want.data());
    for (uint32_t i = 0; i < hp.rope_dim; ++i)
      EXPECT_EQ(as_float(p.ints[p.off_rot + t * hp.rope_dim + i]), want[i]) << "t " << t << " i " << i;
  }
  // A rotation is the CPU rope's: rotating (1, 0) at position 700 gives (cos, sin) of pair 0.
  float x[128] = {1.f};
  rope(x, 1, 128, int(hp.rope_dim), 699, hp.rope_theta, rope_style::normal);
  EXPECT_EQ(x[0], as_float(p.ints[p.off_rot + 2 * hp.rope_dim]));
  EXPECT_EQ(x[1], as_float(p.ints[p.off_rot + 2 * hp.rope_dim + 1]));
}

// A prompt of 20 tokens next to a decode token: the prompt is a run (flash attention, masked out
// of the paged kernel); a step of up to k_qgemm_max_tokens tokens carries its rotation table.
TEST(batch_plan, long_runs_take_the_gemm_path) {
  host_cache cache(config());
  ASSERT_TRUE(cache.grow(0, 20).ok());
  ASSERT_TRUE(cache.grow(1, 5).ok());
  batch b;
  for (int i = 0; i < 20; ++i) b.add(i, 0, i, i == 19);
  b.add(7, 1, 4, true);
  batch_plan p;
  plan_batch(b, cache, qwen_like(), p);
  ASSERT_EQ(p.runs.size(), 1u);
  EXPECT_EQ(p.runs[0].t0, 0);
  EXPECT_EQ(p.runs[0].n, 20);
  EXPECT_EQ(p.runs[0].pos0, 0);
  for (int t = 0; t < 20; ++t) EXPECT_EQ(p.ints[p.off_paged + t], -1);
  EXPECT_EQ(p.ints[p.off_paged + 20], 4);
  EXPECT_TRUE(p.any_paged);
  EXPECT_EQ(p.paged_max_kv, 256);
  ASSERT_GT(p.off_rot, 0u);
  EXPECT_EQ(p.ints.size(), p.off_rot + 21 * size_t(qwen_like().rope_dim));
}

// Steps longer than a decode batch (prefill chunks) carry no rotation table: their RoPE runs in
// its own launch, which computes the angles itself.
TEST(batch_plan, prefill_steps_carry_no_rotations) {
  host_cache cache(config());
  ASSERT_TRUE(cache.grow(0, k_qgemm_max_tokens + 1).ok());
  batch b;
  for (int i = 0; i <= k_qgemm_max_tokens; ++i) b.add(i, 0, i, i == k_qgemm_max_tokens);
  batch_plan p;
  plan_batch(b, cache, qwen_like(), p);
  EXPECT_EQ(p.off_rot, 0u);
  EXPECT_EQ(p.ints.size(), p.off_tables + size_t(p.n_tables) * p.max_blocks);
}

// A hybrid model's step: one DeltaNet run per sequence (first row, tokens, state slot = sequence
// id, first position), after the block tables and before the rotations; none for other models.
TEST(batch_plan, hybrid_models_get_one_delta_net_run_per_sequence) {
  host_cache cache(config());
  ASSERT_TRUE(cache.grow(2, 33).ok());
  ASSERT_TRUE(cache.grow(0, 4).ok());
  batch b;
  for (int i = 30; i < 33; ++i) b.add(i, 2, i, true);  // sequence 2 continues at position 30
  b.add(9, 0, 3, true);
  hparams hp = qwen_like();
  hp.n_layer = 4, hp.full_attn_interval = 4;
  batch_plan p;
  plan_batch(b, cache, hp, p);
  ASSERT_EQ(p.n_dn_runs, 2);
  EXPECT_EQ(p.dn_max_tokens, 3);
  EXPECT_EQ(p.off_dn_runs, p.off_tables + size_t(p.n_tables) * p.max_blocks);
  const std::vector<int32_t> runs(p.ints.begin() + int64_t(p.off_dn_runs), p.ints.begin() + int64_t(p.off_dn_runs) + 8);
  EXPECT_EQ(runs, (std::vector<int32_t>{0, 3, 2, 30, 3, 1, 0, 3}));
  ASSERT_GT(p.off_rot, 0u);
  EXPECT_GE(p.off_rot, p.off_dn_runs + 8);
  EXPECT_EQ(p.off_rot % 2, 0u);

  plan_batch(b, cache, qwen_like(), p);  // not hybrid
  EXPECT_EQ(p.n_dn_runs, 0);
}

}  // namespace
}  // namespace tandem
