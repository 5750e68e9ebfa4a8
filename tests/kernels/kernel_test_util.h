// What the kernel tests share: skipping without a GPU, random inputs, and device copies of host
// vectors that free themselves.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "quant/quant.h"

namespace tandem::test {

inline bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the "no device" error so later calls do not see it
    return false;
  }
  return n > 0;
}

#define REQUIRE_GPU() \
  if (!::tandem::test::have_gpu()) GTEST_SKIP() << "no CUDA device"

inline std::vector<float> randoms(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A device copy of a host vector, or a buffer of `count` elements filled with a poison byte so
// that outputs a kernel failed to write show up; freed on scope exit.
template <class T>
struct dev {
  T* p = nullptr;
  size_t n = 0;
  explicit dev(const std::vector<T>& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit dev(size_t count, uint8_t poison = 0x7f) : n(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, poison, std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
  }
  ~dev() { cudaFree(p); }
  dev(const dev&) = delete;
  dev& operator=(const dev&) = delete;
  std::vector<T> host() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// n_out rows of n_in floats quantized row by row to type t (GGUF layout).
inline std::vector<uint8_t> quantize_matrix(ggml_type t, const std::vector<float>& w, int64_t n_in, int64_t n_out) {
  const uint64_t rb = *row_bytes(t, n_in);
  std::vector<uint8_t> q(rb * n_out);
  for (int64_t o = 0; o < n_out; ++o) quantize_row(t, w.data() + o * n_in, q.data() + o * rb, n_in);
  return q;
}

}  // namespace tandem::test
