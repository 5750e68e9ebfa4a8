// launch_l2_prefetch and launch_l2_prefetch_experts (kernels/l2_prefetch.h): what they refuse
// (no device needed), and on a GPU that ranges up to an allocation's last byte, more chunks than
// threads, invalid expert ids and graph capture run without a fault and leave memory as it was.
// GPU cases skip without a device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/l2_prefetch.h"

namespace tandem {
namespace {

bool has_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

TEST(l2_prefetch, refuses_bad_ranges) {
  alignas(16) static uint8_t buf[64];
  const l2_range ok{buf, 64};
  l2_range many[k_l2_prefetch_max_ranges + 1];
  for (auto& r : many) r = ok;
  EXPECT_EQ(launch_l2_prefetch(many, -1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_l2_prefetch(many, k_l2_prefetch_max_ranges + 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_l2_prefetch(nullptr, 1, nullptr), cudaErrorInvalidValue);
  const l2_range null_ptr{nullptr, 32}, odd{buf + 8, 32};
  EXPECT_EQ(launch_l2_prefetch(&null_ptr, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_l2_prefetch(&odd, 1, nullptr), cudaErrorInvalidValue);
  // Nothing to ask for (no ranges, or none of 16 bytes): success without a launch.
  const l2_range tiny[2] = {{nullptr, 0}, {buf + 8, 15}};
  EXPECT_EQ(launch_l2_prefetch(nullptr, 0, nullptr), cudaSuccess);
  EXPECT_EQ(launch_l2_prefetch(tiny, 2, nullptr), cudaSuccess);
}

TEST(l2_prefetch, experts_refuses_bad_ranges) {
  alignas(16) static uint8_t buf[64];
  alignas(16) static int32_t ids[2] = {0, 1};
  const l2_expert_range ok{buf, 32, 32}, odd_base{buf + 8, 32, 16}, odd_stride{buf, 40, 16}, none{nullptr, 32, 16};
  EXPECT_EQ(launch_l2_prefetch_experts(ids, 2, 2, &ok, -1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_l2_prefetch_experts(ids, 2, 2, &ok, k_l2_prefetch_max_ranges + 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_l2_prefetch_experts(ids, 2, 2, nullptr, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_l2_prefetch_experts(ids, -1, 2, &ok, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_l2_prefetch_experts(ids, 2, 0, &ok, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_l2_prefetch_experts(ids, 2, 2, &odd_base, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_l2_prefetch_experts(ids, 2, 2, &odd_stride, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_l2_prefetch_experts(ids, 2, 2, &none, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_l2_prefetch_experts(nullptr, 2, 2, &ok, 1, nullptr), cudaErrorInvalidValue);
  // Nothing to ask for: success without a launch.
  EXPECT_EQ(launch_l2_prefetch_experts(ids, 0, 2, &ok, 1, nullptr), cudaSuccess);
  EXPECT_EQ(launch_l2_prefetch_experts(ids, 2, 2, &ok, 0, nullptr), cudaSuccess);
}

TEST(l2_prefetch, experts_leave_memory_as_it_was) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  // 16 experts of 1 MiB + 48 bytes; the last expert's range ends at the allocation's last byte.
  const int n_expert = 16;
  const size_t stride = (size_t{1} << 20) + 48, n = stride * n_expert;
  uint8_t* d = nullptr;
  int32_t* di = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n), cudaSuccess);
  const std::vector<int32_t> ids = {15, 3, -1, 3, 16, 0, 7, 15};  // repeats and two invalid ids
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&di), ids.size() * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(di, ids.data(), ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<uint8_t> host(n), back(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>(i * 2654435761u >> 11);
  ASSERT_EQ(cudaMemcpy(d, host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  const l2_expert_range r[2] = {{d, stride, stride}, {d + 16, stride, 100}};
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(launch_l2_prefetch_experts(di, int(ids.size()), n_expert, r, 2, s), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(back == host);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  cudaFree(di);
  cudaFree(d);
}

TEST(l2_prefetch, leaves_memory_as_it_was) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  // 72 MiB: more 16 KiB chunks than the launch's threads, so threads take several.
  const size_t n = size_t{72} << 20;
  uint8_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n), cudaSuccess);
  std::vector<uint8_t> host(n), back(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  ASSERT_EQ(cudaMemcpy(d, host.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
  // The whole buffer, a range ending at its last byte (not a multiple of 16 long), a small one.
  const l2_range r[3] = {{d, n}, {d + n - 16 * 1001 - 16, 16 * 1001 + 7}, {d + 4096, 48}};
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(launch_l2_prefetch(r, 3, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  // Captured and replayed, as the decode steps run it.
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(launch_l2_prefetch(r, 3, s), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&ge, g, 0), cudaSuccess);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaGraphLaunch(ge, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d, n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(back == host);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  cudaFree(d);
}

}  // namespace
}  // namespace tandem
