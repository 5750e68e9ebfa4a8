// An injected device-allocation failure during a load (issue 24): the load fails with the
// out-of-memory error a full GPU gives, frees what it had allocated, and the model already
// resident keeps computing the same logits. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_context.h"
#include "cuda_test_model.h"

namespace tandem {
namespace {

std::vector<float> prompt_logits(backend& be) {
  kv_cache_config cfg;
  cfg.n_ctx = 64;
  cfg.n_seq_max = 1;
  auto cache = be.make_cache(cfg);
  EXPECT_TRUE(cache.ok()) << (cache.ok() ? "" : cache.message());
  if (!cache) return {};
  batch b;
  for (int i = 0; i < 12; ++i) b.add((7 * i + 3) % 96, 0, i, i == 11);
  std::vector<float> logits;
  const auto s = be.forward(b, **cache, logits);
  EXPECT_TRUE(s.ok()) << s.message();
  return logits;
}

TEST(cuda_alloc_fault, failed_load_frees_its_memory_and_the_resident_model_serves) {
  if (cuda_backend_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto m = test::make_tiny_model(test::cuda_tiny_options("qwen3", ggml_type::q8_0, 3));
  ASSERT_TRUE(m.ok()) << m.message();
  const size_t before = device_buffer_bytes();
  auto a = make_cuda_backend((*m)->desc);
  ASSERT_TRUE(a.ok()) << a.message();
  const size_t a_bytes = device_buffer_bytes() - before;
  ASSERT_GT(a_bytes, 0u);
  const auto want = prompt_logits(**a);
  ASSERT_FALSE(want.empty());
  const size_t resident = device_buffer_bytes();  // A with its scratch (its cache is gone again)

  // A second load of the same model gets room for half of what A's load took.
  set_device_alloc_limit(resident + a_bytes / 2);
  auto b = make_cuda_backend((*m)->desc);
  set_device_alloc_limit(0);
  ASSERT_FALSE(b.ok()) << "the load got past the injected limit";
  EXPECT_NE(b.message().find("cudaErrorMemoryAllocation"), std::string::npos) << b.message();
  EXPECT_NE(b.message().find("TANDEM_CUDA_ALLOC_LIMIT"), std::string::npos) << b.message();
  EXPECT_EQ(device_buffer_bytes(), resident) << "the failed load left device memory allocated";

  EXPECT_EQ(prompt_logits(**a), want) << "the resident model changed";
  a->reset();
  EXPECT_EQ(device_buffer_bytes(), before);
}

}  // namespace
}  // namespace tandem
