// kernel_arch() and the shared-memory limit host code follows: the arch of the code the device runs,
// so a compute_70 build on a newer GPU reports 70 (TANDEM_EXPECT_KERNEL_ARCH, set by the Volta run,
// proves the run really executes that code) and is held to a V100's 96 KiB per block.
#include "kernels/arch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernels/device_attribute.h"
#include "kernel_test_util.h"

namespace tandem {
namespace {

int device_arch() {
  return 10 * device_attribute<cudaDevAttrComputeCapabilityMajor>() +
         device_attribute<cudaDevAttrComputeCapabilityMinor>();
}

TEST(kernel_arch, is_at_most_the_device_arch) {
  REQUIRE_GPU();
  const int arch = kernel_arch();
  EXPECT_GE(arch, 70);
  EXPECT_LE(arch, device_arch());
  EXPECT_EQ(arch, kernel_arch());  // cached, stable
}

TEST(kernel_arch, matches_the_build_the_run_expects) {
  REQUIRE_GPU();
  const char* want = std::getenv("TANDEM_EXPECT_KERNEL_ARCH");
  if (!want) GTEST_SKIP() << "TANDEM_EXPECT_KERNEL_ARCH not set";
  EXPECT_EQ(kernel_arch(), std::stoi(want));
}

TEST(kernel_arch, shared_memory_limit_follows_the_code) {
  REQUIRE_GPU();
  const int own = device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
  const int limit = kernel_smem_optin();
  EXPECT_GT(limit, 48 * 1024);
  EXPECT_LE(limit, own);
  if (kernel_arch() == 70) {
    EXPECT_LE(limit, 96 * 1024);
  }
  if (kernel_arch() == device_arch()) {
    EXPECT_EQ(limit, own);
  }
}

TEST(kernel_arch, a_request_past_the_limit_is_refused_before_the_kernel_is_touched) {
  REQUIRE_GPU();
  void (*no_kernel)() = nullptr;
  EXPECT_EQ(allow_dynamic_smem(no_kernel, kernel_smem_optin() + 1), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace tandem
