// vec_dot(type, row, x) against the double-precision dot of dequantize_row(row) and x.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant.h"

namespace {

using tandem::ggml_type;

const ggml_type k_types[] = {ggml_type::f32,  ggml_type::f16,  ggml_type::bf16, ggml_type::q8_0,
                             ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1,
                             ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k};

struct check {
  double got, want, scale;
};

// Quantize random data (offset so that mins and signs matter), then compare vec_dot with the exact
// dot of the dequantized row. The tolerance is relative to sum |w_i x_i| (the size of the terms;
// the plain sum can cancel to near zero).
check run(ggml_type t, int64_t n, uint32_t seed, size_t row_misalign, size_t x_misalign) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(n)), x(static_cast<size_t>(n) + x_misalign);
  for (auto& v : w) v = 0.3f + dist(rng);
  for (auto& v : x) v = dist(rng);
  const float* xp = x.data() + x_misalign;

  const uint64_t rb = *tandem::row_bytes(t, static_cast<uint64_t>(n));
  std::vector<uint8_t> buf(rb + row_misalign);
  uint8_t* row = buf.data() + row_misalign;
  tandem::quantize_row(t, w.data(), row, n);
  std::vector<float> deq(static_cast<size_t>(n));
  tandem::dequantize_row(t, row, deq.data(), n);

  double want = 0.0, scale = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    want += static_cast<double>(deq[i]) * xp[i];
    scale += std::fabs(static_cast<double>(deq[i]) * xp[i]);
  }
  return {static_cast<double>(tandem::vec_dot(t, row, xp, n)), want, scale};
}

TEST(VecDot, MatchesDequantizedDot) {
  for (ggml_type t : k_types) {
    const int64_t bs = tandem::type_info(t).block_size;
    std::vector<int64_t> lengths;
    if (bs == 1) {
      lengths = {1, 2, 7, 15, 16, 17, 31, 33, 100, 255, 4096, 5003};
    } else {
      for (int64_t k : {1, 2, 3, 5, 8, 16, 17, 64}) lengths.push_back(k * bs);
    }
    for (int64_t n : lengths) {
      for (uint32_t seed : {1u, 2u}) {
        const check c = run(t, n, seed, 0, 0);
        EXPECT_NEAR(c.got, c.want, 2e-6 * c.scale + 1e-30)
            << tandem::type_name(t) << " n=" << n << " seed=" << seed;
      }
    }
  }
}

// Rows start wherever a row of a GGUF tensor can start (type-size aligned only), and x need not be
// vector-aligned.
TEST(VecDot, UnalignedInputs) {
  for (ggml_type t : k_types) {
    const int64_t n = 8 * tandem::type_info(t).block_size * (tandem::type_info(t).block_size == 1 ? 64 : 1);
    const size_t row_off = tandem::type_info(t).type_size == 4 ? 4 : 2;
    const check c = run(t, n, 3, row_off, 1);
    EXPECT_NEAR(c.got, c.want, 2e-6 * c.scale) << tandem::type_name(t);
  }
}

// Blocks with extreme scales (fp16 max, subnormal) and all-max levels stay finite and match.
TEST(VecDot, ExtremeBlocks) {
  for (ggml_type t : k_types) {
    const int64_t n = tandem::type_info(t).block_size == 1 ? 64 : 2 * tandem::type_info(t).block_size;
    const uint64_t rb = *tandem::row_bytes(t, static_cast<uint64_t>(n));
    for (uint8_t fill : {uint8_t{0xff}, uint8_t{0x01}, uint8_t{0x77}}) {
      std::vector<uint8_t> row(rb, fill);
      std::vector<float> x(static_cast<size_t>(n), 0.5f), deq(static_cast<size_t>(n));
      tandem::dequantize_row(t, row.data(), deq.data(), n);
      bool finite = true;
      double want = 0.0, scale = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        finite = finite && std::isfinite(deq[i]);
        want += static_cast<double>(deq[i]) * x[i];
        scale += std::fabs(static_cast<double>(deq[i]) * x[i]);
      }
      if (!finite || !std::isfinite(want)) continue;  // fill bytes that encode inf/NaN scales
      const double got = tandem::vec_dot(t, row.data(), x.data(), n);
      EXPECT_NEAR(got, want, 2e-6 * scale + 1e-30) << tandem::type_name(t) << " fill " << int(fill);
    }
  }
}

}  // namespace
