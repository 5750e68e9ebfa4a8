// Decode steps replayed from captured CUDA graphs give bit-identical logits to the same steps
// launched kernel by kernel, across graph-key changes (growing context, argmax or not, a second
// sequence joining). Skips without a CUDA device.
#include <gtest/gtest.h>

#include <random>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_model.h"

namespace tandem {
namespace {

struct side {
  std::unique_ptr<cuda_backend_api> be;
  std::unique_ptr<kv_cache> cache;
};

side make_side(const model_desc& desc, bool graphs) {
  side s;
  cuda_backend_options opt;
  opt.graphs = graphs;
  auto be = make_cuda_backend(desc, opt);
  EXPECT_TRUE(be.ok()) << (be.ok() ? "" : be.message());
  if (!be) return s;
  s.be = std::move(*be);
  kv_cache_config cfg;
  cfg.n_ctx = 700;
  cfg.n_seq_max = 2;
  auto c = s.be->make_cache(cfg);
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.message());
  if (c) s.cache = std::move(*c);
  return s;
}

TEST(cuda_graphs, replay_matches_eager_launches) {
  if (cuda_backend_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto m = test::make_tiny_model(test::cuda_tiny_options("qwen3", ggml_type::q4_k, 11));
  ASSERT_TRUE(m.ok()) << m.message();
  side eager = make_side((*m)->desc, false), graphed = make_side((*m)->desc, true);
  ASSERT_TRUE(eager.cache && graphed.cache);
  std::mt19937 rng(4);
  // 600 steps cross several attention-size buckets; sequence 1 joins halfway (a new key).
  for (int step = 0; step < 600; ++step) {
    batch b;
    b.add(int32_t(rng() % 96), 0, step, true);
    if (step >= 300) b.add(int32_t(rng() % 96), 1, step - 300, true);
    const bool argmax = step % 5 == 4;
    if (argmax) {
      std::vector<int32_t> a, g;
      ASSERT_TRUE(eager.be->forward_argmax(b, *eager.cache, a).ok());
      ASSERT_TRUE(graphed.be->forward_argmax(b, *graphed.cache, g).ok());
      ASSERT_EQ(a, g) << "step " << step;
    } else {
      std::vector<float> a, g;
      ASSERT_TRUE(eager.be->forward(b, *eager.cache, a).ok());
      ASSERT_TRUE(graphed.be->forward(b, *graphed.cache, g).ok());
      ASSERT_EQ(a, g) << "step " << step;  // the same kernels on the same data: bit-identical
    }
  }
  EXPECT_EQ(eager.be->graph_replays(), 0u);
  // All but the first two sightings of each key replay; there are only a few keys.
  EXPECT_GT(graphed.be->graph_replays(), 500u);
}

}  // namespace
}  // namespace tandem
