// TANDEM_CUDA_TRY turns a failed CUDA runtime call into an error naming the call, file and line;
// needs no GPU (error names come from the runtime library's tables).
#include "kernels/cuda_check.h"

#include <gtest/gtest.h>

#include <string>

namespace tandem {
namespace {

cudaError_t pretend_call(cudaError_t e) { return e; }

constexpr int k_try_line = __LINE__ + 3;  // the TANDEM_CUDA_TRY line in checked()

status checked(cudaError_t e) {
  TANDEM_CUDA_TRY(pretend_call(e));
  return {};
}

result<int> checked_value(cudaError_t e) {
  TANDEM_CUDA_TRY(pretend_call(e));
  return 42;
}

TEST(cuda_check, success_passes_through) {
  EXPECT_TRUE(checked(cudaSuccess).ok());
  const auto r = checked_value(cudaSuccess);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 42);
}

TEST(cuda_check, failure_names_code_expression_file_and_line) {
  const status s = checked(cudaErrorInvalidValue);
  ASSERT_FALSE(s.ok());
  const std::string& m = s.message();
  EXPECT_NE(m.find("cudaErrorInvalidValue"), std::string::npos) << m;
  EXPECT_NE(m.find("pretend_call(e)"), std::string::npos) << m;
  EXPECT_NE(m.find("cuda_check_test.cpp:" + std::to_string(k_try_line)), std::string::npos) << m;

  const auto r = checked_value(cudaErrorMemoryAllocation);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("cudaErrorMemoryAllocation"), std::string::npos) << r.message();
}

status select_missing_device() {
  TANDEM_CUDA_TRY(cudaSetDevice(-1));
  return {};
}

// The runtime keeps a failed call's code as its "last error", which the kernel launchers return
// after each launch: once reported, it must be gone, or the next launch fails for no reason.
TEST(cuda_check, a_reported_failure_does_not_linger) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    GTEST_SKIP() << "no CUDA device";
  }
  ASSERT_FALSE(select_missing_device().ok());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace tandem
