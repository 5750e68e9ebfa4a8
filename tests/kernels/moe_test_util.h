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

inline experts make_experts(ggml_type t, int n_expert, int64_t n_in, int64_t n_out, uint32_t seed) {
  experts x;
  const size_t rb = *row_bytes(t, n_in);
  x.stride = (rb * n_out + 15) / 16 * 16;
  x.q.assign(x.stride * n_expert, 0);
  x.deq.resize(size_t(n_expert) * n_out * n_in);
  x.gemm.resize(x.deq.size());
  for (int e = 0; e < n_expert; ++e) {
    const auto q = quantize_matrix(t, randoms(size_t(n_in * n_out), seed + e), n_in, n_out);
    std::copy(q.begin(), q.end(), x.q.begin() + e * x.stride);
    for (int64_t o = 0; o < n_out; ++o) {
      dequantize_row(t, q.data() + o * rb, x.deq.data() + (size_t(e) * n_out + o) * n_in, n_in);
      test::gemm_weights(t, q.data() + o * rb, n_in, x.gemm.data() + (size_t(e) * n_out + o) * n_in);
    }
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
