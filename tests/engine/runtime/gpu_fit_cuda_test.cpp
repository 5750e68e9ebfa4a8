// The single-GPU load path refuses a model whose cache cannot fit the device, with the sizes,
// before allocating anything; the device then still takes a model that fits. Skips without a GPU.
#include <gtest/gtest.h>

#include "backend/cuda/cuda_backend.h"
#include "runtime/model_instance.h"
#include "tiny_model.h"

namespace tandem {
namespace {

TEST(gpu_fit_cuda, too_large_for_the_device_is_refused_before_allocating) {
  if (cuda_backend_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto m = test::make_tiny_model(test::tiny_model_options{});
  ASSERT_TRUE(m.ok()) << m.message();
  instance_options opt;
  opt.gpu = 0;
  opt.cache.n_ctx = 1u << 24;  // 64 sequences of 16M tokens: terabytes of KV cache
  opt.cache.n_seq_max = 64;
  auto refused = make_backend((*m)->desc, opt);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("does not fit GPU"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find(" are free for it"), std::string::npos) << refused.message();
  opt.cache.n_ctx = 64;
  opt.cache.n_seq_max = 1;
  auto fits = make_backend((*m)->desc, opt);
  ASSERT_TRUE(fits.ok()) << fits.message();
  auto cache = (*fits)->make_cache(opt.cache);
  EXPECT_TRUE(cache.ok()) << cache.message();
}

}  // namespace
}  // namespace tandem
