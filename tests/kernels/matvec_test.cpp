// The decode mat-vec kernels against the CPU reference on random inputs (every supported type,
// 1..8 tokens, fused outputs, y += W·x, every rows-per-block variant), plus a bandwidth
// benchmark that prints GB/s of weights and the share of a measured copy bandwidth.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/layer_ops.h"
#include "kernels/matvec.h"
#include "quant/quant.h"
#include "kernel_test_util.h"

namespace tandem {
namespace {

using test::dev;
using test::hbm_matrix;
using test::have_gpu;
using test::quantize_matrix;
using test::randoms;
using test::time_us;

bool int8_activations(ggml_type t) { return t != ggml_type::f32 && t != ggml_type::f16; }

// x as the kernels see it: for quantized weights, blocks of 32 rounded to d * q with
// d = amax / 127 (the same float operations as the GPU); the half step d / 2 per element.
struct x_as_seen {
  std::vector<float> v, half_step;
};
x_as_seen quantize_x(const float* x, int64_t n, bool int8) {
  x_as_seen r{std::vector<float>(x, x + n), std::vector<float>(n, 0.f)};
  if (!int8) return r;
  for (int64_t b = 0; b < n; b += 32) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const float d = amax / 127.f;
    for (int i = 0; i < 32; ++i) {
      const float q = amax > 0.f ? std::nearbyint(x[b + i] / d) : 0.f;
      r.v[b + i] = d * q;
      r.half_step[b + i] = d / 2;
    }
  }
  return r;
}

// Checks one output of the GPU against the CPU row `row` for token row x (the old y0 added):
// 1. against the exact dot of the dequantized weights with x as the kernel sees it:
//    2e-5 of sum |w_i x_i| (float32 rounding, different summation order);
// 2. against the CPU's float vec_dot on the unrounded x: that plus the int8 rounding of x, at
//    most sum |w_i| * d_block / 2 (zero for F32/F16).
// deq: the row dequantized; xs: quantize_x of x.
void check_output(ggml_type t, const uint8_t* row, const std::vector<float>& deq, const x_as_seen& xs,
                  const float* x, int64_t n_in, float got, float y0, const char* what, int64_t o) {
  double exact = y0, mag = std::fabs(y0), rounding = 0;
  for (int64_t i = 0; i < n_in; ++i) {
    exact += double(deq[i]) * xs.v[i];
    mag += std::fabs(double(deq[i]) * xs.v[i]);
    rounding += std::fabs(double(deq[i])) * xs.half_step[i];
  }
  ASSERT_NEAR(got, exact, 2e-5 * mag + 1e-6) << what << " row " << o << " (vs x as quantized)";
  const double ref = vec_dot(t, row, x, n_in) + double(y0);
  ASSERT_NEAR(got, ref, rounding + 2e-5 * mag + 1e-6) << what << " row " << o << " (vs float vec_dot)";
}

// Every row of a matrix dequantized once.
std::vector<std::vector<float>> dequantize_matrix(ggml_type t, const std::vector<uint8_t>& q, int64_t n_in,
                                                  int64_t n_out) {
  const uint64_t rb = *row_bytes(t, n_in);
  std::vector<std::vector<float>> d(n_out, std::vector<float>(n_in));
  for (int64_t o = 0; o < n_out; ++o) dequantize_row(t, q.data() + o * rb, d[o].data(), n_in);
  return d;
}

const ggml_type k_types[] = {ggml_type::f32,  ggml_type::f16,  ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0,
                             ggml_type::q5_1, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k};

class matvec_types : public ::testing::TestWithParam<ggml_type> {};

TEST_P(matvec_types, matches_cpu) {
  REQUIRE_GPU();
  const ggml_type t = GetParam();
  const int64_t n_out = 37;
  // 288 and 768 inputs make matrices whose end is not 16-byte aligned for the 2-byte aligned
  // types (the kernels then load the last blocks 2 bytes at a time).
  for (int64_t n_in : {256, 288, 512, 768, 2304}) {
    if (n_in % int64_t(type_info(t).block_size) != 0) continue;
    const auto q = quantize_matrix(t, randoms(n_in * n_out, 11), n_in, n_out);
    const uint64_t rb = *row_bytes(t, n_in);
    for (int n_tok : {1, 2, 3, 8}) {
      auto x = randoms(n_in * n_tok, 100 + n_tok);
      x[5] = 0.f;
      std::fill(x.begin() + 32, x.begin() + 64, 0.f);  // an all-zero block of x (d = 0)
      dev<uint8_t> dw(q), work(matvec_work_bytes(n_in, n_tok));
      dev<float> dx(x), dy(size_t(n_tok * n_out));
      ASSERT_EQ(launch_matvec(t, dw.p, n_in, n_out, dx.p, n_tok, dy.p, work.p, nullptr), cudaSuccess);
      const auto y = dy.host();
      const auto deq = dequantize_matrix(t, q, n_in, n_out);
      for (int tk = 0; tk < n_tok; ++tk) {
        const auto xs = quantize_x(x.data() + tk * n_in, n_in, int8_activations(t));
        const std::string what =
            std::string(type_name(t)) + " n_in " + std::to_string(n_in) + " tok " + std::to_string(tk);
        for (int64_t o = 0; o < n_out; ++o)
          check_output(t, q.data() + o * rb, deq[o], xs, x.data() + tk * n_in, n_in, y[tk * n_out + o], 0.f,
                       what.c_str(), o);
      }
    }
  }
}

// A random matrix quantized and dequantized, once per (type, n_in, rows, seed) in a test's
// process: the launch-form loops check the same matrices under every form, and the K-quants'
// scale search (~12 M weights/s) need not run again for each.
struct quantized {
  std::vector<uint8_t> q;
  std::vector<std::vector<float>> deq;
};
const quantized& matrix_of(ggml_type t, int64_t n_in, int64_t rows, uint32_t seed) {
  static std::map<std::tuple<ggml_type, int64_t, int64_t, uint32_t>, quantized> memo;
  auto [it, fresh] = memo.try_emplace({t, n_in, rows, seed});
  if (fresh) {
    it->second.q = quantize_matrix(t, randoms(n_in * rows, seed), n_in, rows);
    it->second.deq = dequantize_matrix(t, it->second.q, n_in, rows);
  }
  return it->second;
}

// Three fused outputs of different heights, with and without y += W·x, for every rows-per-block
// variant; 4864 inputs make K-quant rows of an odd number of blocks (Q6_K rows then only 2-byte
// aligned), 6144 even ones.
void check_fused(ggml_type t, int64_t n_in, int n_tok, bool add) {
  const int64_t heights[3] = {203, 64, 31};
  const uint64_t rb = *row_bytes(t, n_in);
  std::vector<const quantized*> qs;
  std::vector<std::unique_ptr<dev<uint8_t>>> dw;
  std::vector<std::unique_ptr<dev<float>>> dy;
  std::vector<std::vector<float>> y0;
  matvec_output outs[3];
  for (int j = 0; j < 3; ++j) {
    qs.push_back(&matrix_of(t, n_in, heights[j], 21 + j));
    y0.push_back(randoms(size_t(n_tok * heights[j]), 31 + j));
    dw.push_back(std::make_unique<dev<uint8_t>>(qs[j]->q));
    dy.push_back(std::make_unique<dev<float>>(y0[j]));
    outs[j] = {dw[j]->p, heights[j], dy[j]->p};
  }
  const auto x = randoms(n_in * n_tok, 41);
  dev<float> dx(x);
  dev<uint8_t> work(matvec_work_bytes(n_in, n_tok));
  ASSERT_EQ(launch_matvec_multi(t, n_in, outs, 3, dx.p, n_tok, add, work.p, nullptr), cudaSuccess);
  std::vector<x_as_seen> xs;
  for (int tk = 0; tk < n_tok; ++tk) xs.push_back(quantize_x(x.data() + tk * n_in, n_in, int8_activations(t)));
  for (int j = 0; j < 3; ++j) {
    const auto y = dy[j]->host();
    const auto& deq = qs[j]->deq;
    for (int tk = 0; tk < n_tok; ++tk) {
      const std::string what = std::string(type_name(t)) + " n_in " + std::to_string(n_in) + " out " +
                               std::to_string(j) + " tok " + std::to_string(tk);
      for (int64_t o = 0; o < heights[j]; ++o)
        check_output(t, qs[j]->q.data() + o * rb, deq[o], xs[tk], x.data() + tk * n_in, n_in, y[tk * heights[j] + o],
                     add ? y0[j][tk * heights[j] + o] : 0.f, what.c_str(), o);
    }
  }
}

TEST_P(matvec_types, fused_outputs_and_add) {
  REQUIRE_GPU();
  const ggml_type t = GetParam();
  for (int rows : {0, 1, 2, 4})
    for (bool per_group : {false, true}) {
      matvec_set_tuning({rows, per_group, per_group});
      for (int64_t n_in : {4864, 6144}) {
        if (n_in % int64_t(type_info(t).block_size) != 0) continue;
        check_fused(t, n_in, 1, false);
        check_fused(t, n_in, 5, true);
      }
    }
  matvec_set_tuning({});
}

INSTANTIATE_TEST_SUITE_P(all, matvec_types, ::testing::ValuesIn(k_types),
                         [](const auto& info) { return std::string(type_name(info.param)); });

// Q/K/V of mixed types (one with its own type, as Q4_K_M's Q6_K attn_v) from the int8 x that
// launch_rms_norm_q8 wrote, then gate/up-like and down-like launches (F16 among them, reading
// the floats) from launch_swiglu_q8's: the producers' floats equal the plain kernels', and the
// mat-vec outputs pass check_output against that x.
TEST(matvec, mixed_types_from_quantizing_producers) {
  REQUIRE_GPU();
  const int n_tok = 3;
  const ggml_type types[3] = {ggml_type::q4_k, ggml_type::q6_k, ggml_type::q4_k};
  const int64_t heights[3] = {96, 40, 33};
  // 768: the warp-per-block producers; 4096: the register-resident RMSNorm.
  for (int64_t n_in : {768, 4096})
  for (int producer = 0; producer < 2; ++producer) {
    const auto a = randoms(n_in * n_tok, 71, -2.f, 2.f), b = randoms(n_in * n_tok, 72), nw = randoms(n_in, 73, 0.5f, 1.5f);
    dev<float> da(a), db(b), dnw(nw), dx(size_t(n_in * n_tok)), dplain(size_t(n_in * n_tok));
    dev<uint8_t> work(matvec_work_bytes(n_in, n_tok));
    if (producer == 0) {
      ASSERT_EQ(launch_rms_norm_q8(da.p, dnw.p, dx.p, n_tok, int(n_in), 1e-6f, work.p, nullptr), cudaSuccess);
      ASSERT_EQ(launch_rms_norm(da.p, dnw.p, dplain.p, n_tok, int(n_in), 1e-6f, nullptr), cudaSuccess);
    } else {
      ASSERT_EQ(launch_swiglu_q8(da.p, db.p, dx.p, n_tok, int(n_in), work.p, nullptr), cudaSuccess);
      ASSERT_EQ(launch_swiglu(da.p, db.p, dplain.p, n_in * n_tok, nullptr), cudaSuccess);
    }
    const auto x = dx.host();
    ASSERT_EQ(x, dplain.host()) << "producer " << producer << " n_in " << n_in;
    const ggml_type t2 = producer == 0 ? types[1] : ggml_type::f16;  // a float-x job in the second round
    const ggml_type ts[3] = {types[0], t2, producer == 0 ? types[2] : ggml_type::q8_0};
    std::vector<std::vector<uint8_t>> qs;
    std::vector<std::unique_ptr<dev<uint8_t>>> dw;
    std::vector<std::unique_ptr<dev<float>>> dy;
    std::vector<std::vector<float>> y0;
    matvec_job js[3];
    for (int j = 0; j < 3; ++j) {
      qs.push_back(quantize_matrix(ts[j], randoms(n_in * heights[j], 81 + j), n_in, heights[j]));
      y0.push_back(randoms(size_t(n_tok * heights[j]), 91 + j));
      dw.push_back(std::make_unique<dev<uint8_t>>(qs[j]));
      dy.push_back(std::make_unique<dev<float>>(y0[j]));
      js[j] = {ts[j], dw[j]->p, heights[j], dy[j]->p};
    }
    const bool add = producer == 1;
    ASSERT_EQ(launch_matvec_jobs(n_in, js, 3, dx.p, true, n_tok, add, work.p, nullptr), cudaSuccess);
    for (int j = 0; j < 3; ++j) {
      const auto y = dy[j]->host();
      const auto deq = dequantize_matrix(ts[j], qs[j], n_in, heights[j]);
      const uint64_t rb = *row_bytes(ts[j], n_in);
      for (int tk = 0; tk < n_tok; ++tk) {
        const auto xs = quantize_x(x.data() + tk * n_in, n_in, int8_activations(ts[j]));
        const std::string what = "producer " + std::to_string(producer) + " " + std::string(type_name(ts[j])) +
                                 " out " + std::to_string(j) + " tok " + std::to_string(tk);
        for (int64_t o = 0; o < heights[j]; ++o)
          check_output(ts[j], qs[j].data() + o * rb, deq[o], xs, x.data() + tk * n_in, n_in, y[tk * heights[j] + o],
                       add ? y0[j][tk * heights[j] + o] : 0.f, what.c_str(), o);
      }
    }
  }
  dev<float> x(size_t(64));
  dev<uint8_t> work(matvec_work_bytes(64, 1));
  EXPECT_EQ(launch_rms_norm_q8(x.p, x.p, x.p, 1, 48, 1e-6f, work.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_rms_norm_q8(x.p, x.p, x.p, 9, 32, 1e-6f, work.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_swiglu_q8(x.p, x.p, x.p, 1, 64, nullptr, nullptr), cudaErrorInvalidValue);
  const matvec_job bad = {ggml_type::bf16, work.p, 4, x.p};
  EXPECT_EQ(launch_matvec_jobs(64, &bad, 1, x.p, true, 1, false, work.p, nullptr), cudaErrorInvalidValue);
}

TEST(matvec, rejects_bad_arguments) {
  REQUIRE_GPU();
  dev<uint8_t> w(size_t(4096)), work(matvec_work_bytes(256, 1));
  dev<float> x(size_t(256)), y(size_t(16));
  EXPECT_EQ(launch_matvec(ggml_type::q4_k, w.p, 100, 4, x.p, 1, y.p, work.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec(ggml_type::q8_0, w.p, 64, 4, x.p, 9, y.p, work.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec(ggml_type::bf16, w.p, 64, 4, x.p, 1, y.p, work.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec(ggml_type::f16, w.p, 48, 4, x.p, 1, y.p, work.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec(ggml_type::q8_0, w.p, 64, 4, x.p, 1, y.p, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec(ggml_type::q8_0, w.p + 2, 64, 4, x.p, 1, y.p, work.p, nullptr), cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_matvec(ggml_type::q8_0, w.p, 64, 4, x.p + 1, 1, y.p, work.p, nullptr), cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_matvec(ggml_type::q8_0, w.p, 64, 4, x.p, 1, y.p, work.p + 8, nullptr), cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_matvec(ggml_type::f32, w.p, 64, 4, x.p, 1, y.p, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(matvec_work_bytes(0, 1), 0u);
  EXPECT_GE(matvec_work_bytes(4096, 8), size_t(4096 * 8 + 4096 / 32 * 8 * 8));
}

// x with outliers, as real activations have: one value of about 200 in every fourth block of 32
// among values in [-1, 1].
std::vector<float> outlier_x(int64_t n, uint32_t seed) {
  auto x = randoms(n, seed);
  for (int64_t i = 7; i < n; i += 128) x[i] = (i / 128) % 2 ? 200.f : -170.f;
  return x;
}

// A dequantized row dotted with x in doubles; mag = sum |w x| (what rounding errors scale with).
double exact_dot(const std::vector<float>& w, const float* x, int64_t n, double& mag) {
  double s = 0;
  mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double p = double(w[i]) * x[i];
    s += p, mag += std::fabs(p);
  }
  return s;
}

// The output head's path (launch_matvec_float_x) on x with outliers, as real activations have:
// one value of ~200 in every fourth block of 32 among values in [-1, 1]. Its outputs must match
// the dequantized weights dotted with the float x (2e-5 of sum |w x|); the int8 path must not
// (its block scale of 200 / 127 rounds the small values to 0 or +-1.6), which shows that the
// input tells the two apart.
TEST(matvec, float_x_matches_outliers_int8_does_not) {
  REQUIRE_GPU();
  const int64_t n_out = 64;
  // 288 and 768: matrices whose end is not 16-byte aligned for the 2-byte aligned types.
  for (int64_t n_in : {288, 768, 4096})
  for (ggml_type t : k_types) {
    if (!int8_activations(t) || n_in % int64_t(type_info(t).block_size) != 0) continue;
    const auto q = quantize_matrix(t, randoms(n_in * n_out, 111), n_in, n_out);
    const auto deq = dequantize_matrix(t, q, n_in, n_out);
    for (int n_tok : {1, 3, 8}) {
      const auto x = outlier_x(n_in * n_tok, 112 + n_tok);
      dev<uint8_t> dw(q), work(matvec_work_bytes(n_in, n_tok));
      dev<float> dx(x), dy(size_t(n_tok * n_out)), dy8(size_t(n_tok * n_out));
      ASSERT_EQ(launch_matvec_float_x(t, dw.p, n_in, n_out, dx.p, n_tok, dy.p, nullptr), cudaSuccess);
      ASSERT_EQ(launch_matvec(t, dw.p, n_in, n_out, dx.p, n_tok, dy8.p, work.p, nullptr), cudaSuccess);
      const auto y = dy.host(), y8 = dy8.host();
      double int8_worst = 0;  // largest error of the int8 path in units of the tolerance
      for (int tk = 0; tk < n_tok; ++tk)
        for (int64_t o = 0; o < n_out; ++o) {
          double mag = 0;
          const double exact = exact_dot(deq[o], x.data() + tk * n_in, n_in, mag);
          const double tol = 2e-5 * mag + 1e-6;
          ASSERT_NEAR(y[tk * n_out + o], exact, tol) << type_name(t) << " n_in " << n_in << " tok " << tk << " row " << o;
          int8_worst = std::max(int8_worst, std::fabs(y8[tk * n_out + o] - exact) / tol);
        }
      EXPECT_GT(int8_worst, 10.0) << type_name(t) << " n_in " << n_in << ": the int8 path should miss on this input";
    }
  }
  dev<uint8_t> w(size_t(4096));
  dev<float> x(size_t(256)), y(size_t(16));
  EXPECT_EQ(launch_matvec_float_x(ggml_type::q4_k, w.p, 100, 4, x.p, 1, y.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec_float_x(ggml_type::bf16, w.p, 64, 4, x.p, 1, y.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec_float_x(ggml_type::q8_0, w.p, 64, 4, x.p, 9, y.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec_float_x(ggml_type::q8_0, w.p, 64, 4, x.p + 1, 1, y.p, nullptr), cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_matvec_float_x(ggml_type::f16, w.p, 64, 4, x.p, 1, y.p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The head's finer path (launch_matvec_fine_x: x's int8 copy plus its residual's) on the same
// inputs: within 2e-4 of sum |w x| of the float result (one int8 copy misses by 1-2% there), for
// 1..4 tokens; bad arguments are errors.
TEST(matvec, fine_x_is_close_to_float_x) {
  REQUIRE_GPU();
  const int64_t n_out = 64;
  for (int64_t n_in : {288, 768, 4096})
    for (ggml_type t : k_types) {
      if (n_in % int64_t(type_info(t).block_size) != 0) continue;
      const auto q = quantize_matrix(t, randoms(n_in * n_out, 131), n_in, n_out);
      const auto deq = dequantize_matrix(t, q, n_in, n_out);
      for (int n_tok : {1, 2, 4}) {
        const auto x = outlier_x(n_in * n_tok, 132 + n_tok);
        dev<uint8_t> dw(q), work(matvec_work_bytes(n_in, 2 * n_tok));
        dev<float> dx(x), dy(size_t(n_tok * n_out));
        ASSERT_EQ(launch_matvec_fine_x(t, dw.p, n_in, n_out, dx.p, n_tok, dy.p, work.p, nullptr), cudaSuccess);
        const auto y = dy.host();
        for (int tk = 0; tk < n_tok; ++tk)
          for (int64_t o = 0; o < n_out; ++o) {
            double mag = 0;
            const double exact = exact_dot(deq[o], x.data() + tk * n_in, n_in, mag);
            ASSERT_NEAR(y[tk * n_out + o], exact, 2e-4 * mag + 1e-6)
                << type_name(t) << " n_in " << n_in << " tok " << tk << " row " << o;
          }
      }
    }
  dev<uint8_t> w(size_t(4096)), work(matvec_work_bytes(256, 8));
  dev<float> x(size_t(256)), y(size_t(16));
  EXPECT_EQ(launch_matvec_fine_x(ggml_type::q4_k, w.p, 100, 4, x.p, 1, y.p, work.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec_fine_x(ggml_type::q4_k, w.p, 32, 4, x.p, 1, y.p, work.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec_fine_x(ggml_type::q8_0, w.p, 64, 4, x.p, 5, y.p, work.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec_fine_x(ggml_type::q8_0, w.p, 64, 4, x.p, 1, y.p, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec_fine_x(ggml_type::q8_0, w.p, 64, 4, x.p + 1, 1, y.p, work.p, nullptr),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_matvec_fine_x(ggml_type::f16, w.p, 64, 4, x.p, 1, y.p, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Decode mat-vec bandwidth for one token (and 8 tokens on the FFN shape) on the shapes of an
// 8B model: 4096 x 4096 (wq/wo), 12288 x 4096 (gate/up), 4096 x 12288 (down). Each launch reads
// the next of several copies of the matrix (together > 4x the L2) so weights come from HBM; the
// x quantization is inside the timing. Matrices are a quantized 64-row tile repeated. Prints
// GB/s of weights and the share of the device-to-device copy bandwidth measured here (bytes
// read + written); asserts only that the launches succeed.
TEST(big, matvec_bandwidth) {
  REQUIRE_GPU();
  const size_t copy_bytes = size_t(1) << 30;
  double copy_gbs = 0;
  {
    dev<uint8_t> a(copy_bytes, 1), b(copy_bytes, 2);
    const double us =
        time_us([&](int, cudaStream_t s) { cudaMemcpyAsync(b.p, a.p, copy_bytes, cudaMemcpyDeviceToDevice, s); });
    copy_gbs = 2.0 * copy_bytes / (us * 1e-6) / 1e9;
  }
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device %s: copy bandwidth %.0f GB/s (read + write)\n", prop.name, copy_gbs);
  std::printf(
      "us: per call, 50 calls replayed from a CUDA graph (GPU time) and launched one by one; GB/s and share of\n"
      "copy from the graph time; then GB/s with 1 / 2 / 4 rows per block, persistent | one block per group |\n"
      "built-in choices without programmatic dependent launch\n");
  std::printf("%-5s %-13s %3s %7s %7s %6s %7s\n", "type", "n_out x n_in", "tok", "us", "us(1by1)", "GB/s", "of copy");
  // The fixed cost of a launch (x quantization, launch gaps, ramp and tail) on a small matrix.
  for (ggml_type t : {ggml_type::f16, ggml_type::q4_0, ggml_type::q4_k, ggml_type::q6_k}) {
    const int64_t n_in = 4096, n_out = 64;
    dev<uint8_t> dw(quantize_matrix(t, randoms(n_in * n_out, 53), n_in, n_out));
    dev<float> dx(randoms(n_in, 54));
    dev<float> dy{size_t(n_out)};
    dev<uint8_t> work(matvec_work_bytes(n_in, 1));
    auto run = [&](int, cudaStream_t s) { launch_matvec(t, dw.p, n_in, n_out, dx.p, 1, dy.p, work.p, s); };
    std::printf("%-5s %5lld x %-5lld (fixed cost): %.1f us per call in a graph, %.1f us launched one by one\n",
                std::string(type_name(t)).c_str(), static_cast<long long>(n_out), static_cast<long long>(n_in),
                time_us(run, true), time_us(run));
  }
  struct shape {
    int64_t n_out, n_in;
  };
  for (const shape sh : {shape{4096, 4096}, shape{12288, 4096}, shape{4096, 12288}}) {
    for (ggml_type t : k_types) {
      const hbm_matrix w(t, sh.n_in, sh.n_out);
      const size_t mat = w.bytes();
      for (int n_tok : {1, 8}) {
        if (n_tok == 8 && sh.n_out != 12288) continue;
        dev<float> dx(randoms(sh.n_in * n_tok, 52));
        dev<float> dy(size_t(sh.n_out * n_tok));
        dev<uint8_t> work(matvec_work_bytes(sh.n_in, n_tok));
        cudaError_t err = cudaSuccess;
        auto run = [&](int i, cudaStream_t s) {
          const cudaError_t e = launch_matvec(t, w.at(i), sh.n_in, sh.n_out, dx.p, n_tok, dy.p,
                                              work.p, s);
          if (e != cudaSuccess) err = e;
        };
        const double us = time_us(run, true), us_stream = time_us(run);
        double forced[7];
        for (int k = 0; k < 7; ++k) {
          matvec_set_tuning(k < 6 ? matvec_tuning{1 << (k % 3), k >= 3, false} : matvec_tuning{0, false, true});
          forced[k] = double(mat) / (time_us(run, true) * 1e-6) / 1e9;
        }
        matvec_set_tuning({});
        ASSERT_EQ(err, cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const double gbs = double(mat) / (us * 1e-6) / 1e9;
        std::printf(
            "%-5s %5lld x %-5lld %3d %7.1f %7.1f %6.0f %6.1f%% | %4.0f %4.0f %4.0f | %4.0f %4.0f %4.0f | %4.0f\n",
            std::string(type_name(t)).c_str(), static_cast<long long>(sh.n_out), static_cast<long long>(sh.n_in),
            n_tok, us, us_stream, gbs, 100.0 * gbs / copy_gbs, forced[0], forced[1], forced[2], forced[3],
            forced[4], forced[5], forced[6]);
      }
    }
  }
}

// The output head's shapes (151936 x 4096 and Qwen3.5's 248320 x 2048; Q6_K as in Q4_K_M, and
// Q8_0) with the int8 copy of x, with float x (launch_matvec_float_x) and with the finer pair of
// int8 copies, one token and more; as matvec_bandwidth (two copies of the matrix, > 4x the L2).
// At 2048 inputs the Q6_K rows are also timed with the 128-thread groups that short rows had
// before (matvec_tuning::wide_short_rows). Prints us and GB/s; asserts only that the launches succeed.
TEST(big, head_bandwidth) {
  REQUIRE_GPU();
  struct shape {
    int64_t n_in, n_out;
  };
  for (const shape sh : {shape{4096, 151936}, shape{2048, 248320}})
    for (ggml_type t : {ggml_type::q6_k, ggml_type::q8_0}) {
      const int64_t n_in = sh.n_in, n_out = sh.n_out, tile = 64;
      const auto q = quantize_matrix(t, randoms(n_in * tile, 121), n_in, tile);
      const size_t mat = q.size() * size_t(n_out / tile);
      std::vector<uint8_t> one(mat);
      for (int64_t i = 0; i < n_out / tile; ++i) std::copy(q.begin(), q.end(), one.begin() + i * q.size());
      const int copies = 2;
      dev<uint8_t> dw(mat * copies, 0);
      for (int c = 0; c < copies; ++c)
        ASSERT_EQ(cudaMemcpy(dw.p + c * mat, one.data(), mat, cudaMemcpyHostToDevice), cudaSuccess);
      for (int n_tok : {1, 4, 8}) {
        dev<float> dx(randoms(n_in * n_tok, 122)), dy(size_t(n_out * n_tok));
        dev<uint8_t> work(matvec_work_bytes(n_in, n_tok));
        cudaError_t err = cudaSuccess;
        dev<uint8_t> work2(matvec_work_bytes(n_in, 2 * n_tok));
        for (const char* mode : {"int8", "float", "fine", "int8/wide", "fine/wide"}) {
          const std::string m = mode;
          const bool wide = m.find("/wide") != std::string::npos;
          if (wide && (t != ggml_type::q6_k || n_in > 2048)) continue;
          if (m.rfind("fine", 0) == 0 && 2 * n_tok > k_matvec_max_tokens) continue;
          matvec_tuning tune;
          tune.wide_short_rows = wide;
          matvec_set_tuning(tune);
          auto run = [&](int i, cudaStream_t s) {
            const uint8_t* w = dw.p + (i % copies) * mat;
            const cudaError_t e =
                m == "float" ? launch_matvec_float_x(t, w, n_in, n_out, dx.p, n_tok, dy.p, s)
                : m.rfind("fine", 0) == 0 ? launch_matvec_fine_x(t, w, n_in, n_out, dx.p, n_tok, dy.p, work2.p, s)
                                          : launch_matvec(t, w, n_in, n_out, dx.p, n_tok, dy.p, work.p, s);
            if (e != cudaSuccess) err = e;
          };
          const double us = time_us(run, true);
          matvec_set_tuning({});
          std::printf("head %-5s %lld x %lld, %d tok, %-9s x: %7.1f us, %6.0f GB/s\n",
                      std::string(type_name(t)).c_str(), static_cast<long long>(n_out), static_cast<long long>(n_in),
                      n_tok, mode, us, double(mat) / (us * 1e-6) / 1e9);
        }
        ASSERT_EQ(err, cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      }
    }
}

// MoE routers (float32, one token: Qwen3-30B-A3B's 128 x 2048, Qwen3.5-35B-A3B's 256 x 2048,
// the 177B shape's 512 x 3072), from HBM as matvec_bandwidth, with the 512-thread row groups and
// with the 128-thread ones (matvec_tuning::narrow_f32_rows). Prints us and GB/s; asserts only
// that the launches succeed.
TEST(big, router_bandwidth) {
  REQUIRE_GPU();
  struct shape {
    int64_t n_out, n_in;
  };
  for (const shape sh : {shape{128, 2048}, shape{256, 2048}, shape{512, 3072}}) {
    const hbm_matrix w(ggml_type::f32, sh.n_in, sh.n_out);
    dev<float> dx(randoms(sh.n_in, 61)), dy(size_t(sh.n_out));
    cudaError_t err = cudaSuccess;
    auto run = [&](int i, cudaStream_t s) {
      const cudaError_t e = launch_matvec(ggml_type::f32, w.at(i), sh.n_in, sh.n_out, dx.p, 1, dy.p, nullptr, s);
      if (e != cudaSuccess) err = e;
    };
    double us[2];
    for (int narrow = 0; narrow < 2; ++narrow) {
      matvec_tuning tune;
      tune.narrow_f32_rows = narrow == 1;
      matvec_set_tuning(tune);
      us[narrow] = time_us(run, true);
      matvec_set_tuning({});
    }
    ASSERT_EQ(err, cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::printf("router F32 %lld x %lld, 1 tok: %.2f us (%.0f GB/s) with 512-thread groups, %.2f us with 128\n",
                static_cast<long long>(sh.n_out), static_cast<long long>(sh.n_in), us[0],
                double(w.bytes()) / (us[0] * 1e-6) / 1e9, us[1]);
  }
}

// One launch per type on the gate/up shape, for a profiler (ncu --kernel-name regex:matvec);
// asserts only that the launches succeed.
TEST(big, matvec_profile) {
  REQUIRE_GPU();
  const int64_t n_in = 4096, n_out = 12288, tile = 64;
  for (ggml_type t : {ggml_type::f16, ggml_type::q4_0, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
    const auto q = quantize_matrix(t, randoms(n_in * tile, 61), n_in, tile);
    std::vector<uint8_t> big(q.size() * size_t(n_out / tile));
    for (int64_t i = 0; i < n_out / tile; ++i) std::copy(q.begin(), q.end(), big.begin() + i * q.size());
    dev<uint8_t> dw(big), work(matvec_work_bytes(n_in, 1));
    dev<float> dx(randoms(n_in, 62));
    dev<float> dy{size_t(n_out)};
    ASSERT_EQ(launch_matvec(t, dw.p, n_in, n_out, dx.p, 1, dy.p, work.p, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
}

}  // namespace
}  // namespace tandem
