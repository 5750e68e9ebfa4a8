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

// A matrix for the bandwidth benchmarks (big.*): n_out rows made of one quantized 64-row tile of
// random weights repeated, in back-to-back copies (together > 256 MiB, over 4x any L2) so that
// launches cycling over them with at(i) read their weights from HBM.
struct hbm_matrix {
  std::vector<uint8_t> one;  // one copy
  int copies;
  dev<uint8_t> d;
  hbm_matrix(ggml_type t, int64_t n_in, int64_t n_out)
      : one(repeated_tile(t, n_in, n_out)),
        copies(int(std::max<size_t>(2, (size_t(256) << 20) / one.size() + 1))),
        d(one.size() * size_t(copies), 0) {
    for (int c = 0; c < copies; ++c)
      EXPECT_EQ(cudaMemcpy(d.p + size_t(c) * one.size(), one.data(), one.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  const uint8_t* at(int i) const { return d.p + size_t(i % copies) * one.size(); }
  size_t bytes() const { return one.size(); }

 private:
  static std::vector<uint8_t> repeated_tile(ggml_type t, int64_t n_in, int64_t n_out) {
    const int64_t tile = 64;
    const auto q = quantize_matrix(t, randoms(size_t(n_in * tile), 51), n_in, tile);
    std::vector<uint8_t> m(q.size() * size_t(n_out / tile));
    for (int64_t r = 0; r < n_out / tile; ++r) std::copy(q.begin(), q.end(), m.begin() + r * int64_t(q.size()));
    return m;
  }
};

// GPU microseconds per launch(i, stream) call: 10 warm-up calls, then the median of 5 timings of 50
// calls (replayed from one captured CUDA graph with graph, so launch gaps drop out). Benchmarks
// (the big.* tests) only.
template <class F>
double time_us(F&& launch, bool graph = false) {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 10; ++i) launch(i, s);
  const int reps = 50;
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    for (int i = 0; i < reps; ++i) launch(i, s);
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiateWithFlags(&exec, g, 0);
    cudaGraphDestroy(g);
    cudaGraphLaunch(exec, s);
  }
  std::vector<float> ms;
  for (int r = 0; r < 5; ++r) {
    cudaEventRecord(e0, s);
    if (graph)
      cudaGraphLaunch(exec, s);
    else
      for (int i = 0; i < reps; ++i) launch(i, s);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float m = 0;
    cudaEventElapsedTime(&m, e0, e1);
    ms.push_back(m / reps);
  }
  if (exec) cudaGraphExecDestroy(exec);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
  std::sort(ms.begin(), ms.end());
  return ms[2] * 1e3;
}

}  // namespace tandem::test
