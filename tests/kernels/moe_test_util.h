// What the mixture-of-experts kernel tests share (moe_test.cpp, moe_matvec_test.cpp): random
// expert matrices with their dequantized and fp16 forms, random expert ids, and x as the int8
// decode kernels see it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "kernel_test_util.h"

namespace tandem::test {

inline bool int8_activations(ggml_type t) { return t != ggml_type::f32 && t != ggml_type::f16; }

// x as the quantized kernels see it (blocks of 32 rounded to d q, d = amax / 127: the same float
// operations as the GPU's copy).
inline std::vector<float> as_seen(const float* x, int64_t n, bool int8) {
  std::vector<float> v(x, x + n);
  if (!int8) return v;
  for (int64_t b = 0; b < n; b += 32) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float d = amax / 127.f;
    for (int i = 0; i < 32; ++i) v[b + i] = amax > 0.f ? d * std::nearbyint(x[b + i] / d) : 0.f;
  }
  return v;
}

struct experts {
  std::vector<uint8_t> q;  // n_expert matrices back to back
  std::vector<float> deq;  // the same dequantized
  std::vector<float> gemm;  // the fp16 weights the grouped GEMM multiplies (test::gemm_weights)
  size_t stride = 0;
};

// Random expert matrices. Every row is one of a pool of 257 random rows quantized once: row o of
// expert e is pool row (seed + 131 e + 7 o) mod 257. 257 being prime, two experts (at most 257)
// differ at every row, and one expert's rows repeat only 257 apart. Quantizing every row instead
// (the K-quants' scale search runs at ~12 M weights/s) took ~5 s a 32-expert gate or up of the
// Qwen3-30B shape; the test made of such sets took about half of a GPU suite run.
inline experts make_experts(ggml_type t, int n_expert, int64_t n_in, int64_t n_out, uint32_t seed) {
  constexpr int64_t k_pool = 257;
  EXPECT_LE(n_expert, k_pool) << "more experts than pool rows: some would be equal";
  experts x;
  const size_t rb = *row_bytes(t, n_in);
  const auto pool = quantize_matrix(t, randoms(size_t(n_in * k_pool), seed), n_in, k_pool);
  std::vector<float> deq(size_t(k_pool * n_in)), gemm(deq.size());
  for (int64_t r = 0; r < k_pool; ++r) {
    dequantize_row(t, pool.data() + r * rb, deq.data() + r * n_in, n_in);
    test::gemm_weights(t, pool.data() + r * rb, n_in, gemm.data() + r * n_in);
  }
  x.stride = (rb * n_out + 15) / 16 * 16;
  x.q.assign(x.stride * n_expert, 0);
  x.deq.resize(size_t(n_expert) * n_out * n_in);
  x.gemm.resize(x.deq.size());
  for (int e = 0; e < n_expert; ++e)
    for (int64_t o = 0; o < n_out; ++o) {
      const int64_t r = (seed + 131 * int64_t(e) + 7 * o) % k_pool;
      std::copy_n(pool.begin() + r * rb, rb, x.q.begin() + e * x.stride + o * rb);
      const size_t at = (size_t(e) * n_out + o) * n_in;
      std::copy_n(deq.begin() + r * n_in, n_in, x.deq.begin() + at);
      std::copy_n(gemm.begin() + r * n_in, n_in, x.gemm.begin() + at);
    }
  return x;
}

// Random ids: distinct within a token, repeated across tokens (few experts), and with `bad`,
// one id outside [0, n_expert).
inline std::vector<int32_t> random_ids(int n_tok, int k, int n_expert, uint32_t seed, bool bad = false) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids;
  for (int t = 0; t < n_tok; ++t) {
    std::vector<int32_t> all(n_expert);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    ids.insert(ids.end(), all.begin(), all.begin() + k);
  }
  if (bad) ids[ids.size() / 2] = n_expert + 3;
  return ids;
}

}  // namespace tandem::test
