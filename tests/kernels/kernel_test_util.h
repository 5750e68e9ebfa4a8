// What the kernel tests share: skipping without a GPU, random inputs, the fp16 weights the GEMMs
// multiply, and device copies of host vectors that free themselves.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/qgemm_frag.h"
#include "quant/blocks.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "quant/quant_impl.h"

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

inline float f16_round(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

// The fp16 weights of one Q4_K or Q6_K row as the fragment blocks (kernels/qgemm_frag.cu) make
// them: the sub-block's scale and min rounded to fp16, then q * scale - min rounded once.
inline void frag_weights(ggml_type t, const uint8_t* row, int64_t n_in, float* w) {
  for (int64_t b = 0; b < n_in / 256; ++b, w += 256) {
    if (t == ggml_type::q4_k) {
      const auto* blk = reinterpret_cast<const block_q4_k*>(row) + b;
      const float d = fp16_to_fp32(blk->d), dmin = fp16_to_fp32(blk->dmin);
      const uint8_t* s = blk->scales;
      for (int sb = 0; sb < 8; ++sb) {
        uint8_t sc = 0, m = 0;
        quant_detail::k4_scale_min(sb, s, sc, m);
        const double ds = f16_round(d * float(sc)), ms = f16_round(dmin * float(m));
        for (int l = 0; l < 32; ++l) {
          const int q = (blk->qs[32 * (sb / 2) + l] >> (4 * (sb % 2))) & 15;
          w[32 * sb + l] = f16_round(float(q * ds - ms));
        }
      }
    } else {  // q6_k
      const auto* blk = reinterpret_cast<const block_q6_k*>(row) + b;
      const float d = fp16_to_fp32(blk->d);
      for (int i = 0; i < 256; ++i) {
        const int h = i / 128, j = i % 128 / 32, l = i % 32;
        const uint8_t ql = blk->ql[64 * h + 32 * (j % 2) + l], qh = blk->qh[32 * h + l];
        const int q = (((ql >> (4 * (j / 2))) & 15) | (((qh >> (2 * j)) & 3) << 4)) - 32;
        w[i] = f16_round(float(q) * f16_round(d * float(blk->scales[8 * h + 2 * j + l / 16])));
      }
    }
  }
}

// The fp16 weights (as floats) of one GGUF row that the tensor-core GEMMs (kernels/qgemm.h,
// kernels/moe.h) multiply: the CPU's dequantized floats rounded to fp16, or where the fragment
// blocks serve the type on this device (kernels/qgemm_frag.h), their rounding above.
inline void gemm_weights(ggml_type t, const uint8_t* row, int64_t n_in, float* w) {
  if (qgemm_frag_serves(t) && n_in % 256 == 0) return frag_weights(t, row, n_in, w);
  dequantize_row(t, row, w, n_in);
  for (int64_t i = 0; i < n_in; ++i) w[i] = f16_round(w[i]);
}

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
