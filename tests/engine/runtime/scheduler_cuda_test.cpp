// The serving scheduler on the CUDA backend: batched greedy generations (decode tokens beside
// other sequences' prompt chunks) equal the same requests run alone. Skips without a device.
#include "scheduler_test_util.h"

namespace tandem {
namespace {

void check_on_gpu(const std::string& arch) {
  if (cuda_backend_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  // Passes of at most four tokens: every row takes the same kernels (int8 mat-vecs, the head's
  // finer int8 variant) whatever shares it; past that the head and the GEMM path change numerics.
  test::check_batched_equals_alone(arch, true, /*chunk=*/2, /*slots=*/2);
}

TEST(scheduler_cuda, batched_greedy_equals_alone) { check_on_gpu("qwen3"); }
TEST(scheduler_cuda, batched_greedy_equals_alone_hybrid) { check_on_gpu("qwen35"); }
TEST(scheduler_cuda, batched_greedy_equals_alone_moe) { check_on_gpu("qwen3moe"); }

// Chunks long enough for the flash-attention prefill beside other sequences' decode tokens, and
// passes past the mat-vec size: every request completes with its full answer.
TEST(scheduler_cuda, mixed_prefill_and_decode_passes) {
  if (cuda_backend_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto e = test::make_engine("qwen3", 4, 256, true);
  scheduler s(*e.be, *e.cache, test::text_of, {.chunk_tokens = 64});
  std::vector<std::future<result<generate_result>>> runs;
  for (int i = 0; i < 12; ++i)
    runs.push_back(std::async(std::launch::async, [&s, i] { return s.generate(test::greedy(test::prompt_of(i, 20 + 9 * i), 16), {}); }));
  for (auto& r : runs) {
    auto res = r.get();
    ASSERT_TRUE(res.ok()) << res.message();
    EXPECT_EQ(res->tokens.size(), 16u);
  }
}

}  // namespace
}  // namespace tandem
