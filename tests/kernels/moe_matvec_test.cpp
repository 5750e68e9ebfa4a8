// The mixture-of-experts decode mat-vec (kernels/moe_matvec.cu) against CPU references on random
// inputs: every type, 1..8 tokens, k 1..8, shared and per-pair x, fused gate/up, repeated and
// invalid ids; SwiGLU's int8 copy feeding the down projection; the launch with the SwiGLU in it
// against the mat-vec then launch_moe_swiglu_q8, bit for bit; the down projection with the combine
// in its launch; settled ids (weights fetched before the launch's wait) against unsettled, bit
// for bit. big.moe_decode_bandwidth prints decode GB/s of both forms, big.moe_down_combine_bandwidth
// the down projection's with its combine. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/matvec.h"
#include "kernels/moe.h"
#include "quant/quant.h"
#include "kernel_test_util.h"
#include "moe_test_util.h"

namespace tandem {
namespace {

using test::as_seen;
using test::dev;
using test::experts;
using test::int8_activations;
using test::make_experts;
using test::quantize_matrix;
using test::random_ids;
using test::randoms;
using test::time_us;

// One case: n_outs matrix sets against x of n_tok rows (x_stride 0) or n_tok * k rows.
void check_matvec(ggml_type t, int n_expert, int64_t n_in, int64_t n_out, int n_tok, int k, int64_t x_stride,
                  int n_outs, bool bad_id) {
  const std::string what = std::string(type_name(t)) + " E " + std::to_string(n_expert) + " " +
                           std::to_string(n_out) + "x" + std::to_string(n_in) + " tok " + std::to_string(n_tok) +
                           " k " + std::to_string(k) + " x_stride " + std::to_string(x_stride) + " outs " +
                           std::to_string(n_outs);
  SCOPED_TRACE(what);
  experts ex[2] = {make_experts(t, n_expert, n_in, n_out, 50), make_experts(t, n_expert, n_in, n_out, 950)};
  const int n_pairs = n_tok * k, x_rows = x_stride == 0 ? n_tok : n_pairs;
  const int64_t xs = x_stride == 0 ? n_in : x_stride;
  auto x = randoms(size_t(x_rows * xs), 77);
  std::fill(x.begin(), x.begin() + 32, 0.f);  // an all-zero block (d = 0)
  const auto ids = random_ids(n_tok, k, n_expert, 5, bad_id);
  dev<uint8_t> w0(ex[0].q), w1(ex[1].q), work(moe_matvec_work_bytes(n_in, x_rows));
  dev<float> dx(x), y0(size_t(n_pairs * n_out)), y1(size_t(n_pairs * n_out));
  dev<int32_t> di(ids);
  const moe_matvec_output outs[2] = {{w0.p, y0.p}, {w1.p, y1.p}};
  ASSERT_EQ(launch_moe_matvec_multi(t, outs, n_outs, ex[0].stride, n_expert, n_in, n_out, dx.p, x_stride, false,
                                    n_tok, k, di.p, work.p, nullptr),
            cudaSuccess);
  const std::vector<float> got[2] = {y0.host(), y1.host()};
  // Settled ids (the first rows fetched before the launch's wait): the same bits.
  dev<float> s0(size_t(n_pairs * n_out)), s1(size_t(n_pairs * n_out));
  const moe_matvec_output souts[2] = {{w0.p, s0.p}, {w1.p, s1.p}};
  ASSERT_EQ(launch_moe_matvec_multi(t, souts, n_outs, ex[0].stride, n_expert, n_in, n_out, dx.p, x_stride, false,
                                    n_tok, k, di.p, work.p, nullptr, true),
            cudaSuccess);
  const auto bits = [](const std::vector<float>& v) {
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
  };
  EXPECT_EQ(bits(s0.host()), bits(got[0]));
  if (n_outs == 2) {
    EXPECT_EQ(bits(s1.host()), bits(got[1]));
  }
  for (int m = 0; m < n_outs; ++m)
    for (int p = 0; p < n_pairs; ++p) {
      const int e = ids[p];
      const int64_t xr = x_stride == 0 ? p / k : p;
      const auto xv = as_seen(x.data() + xr * xs, n_in, int8_activations(t));
      for (int64_t o = 0; o < n_out; ++o) {
        const float g = got[m][p * n_out + o];
        if (e < 0 || e >= n_expert) {
          ASSERT_TRUE(std::isnan(g)) << "pair " << p << " row " << o << " (invalid id)";
          continue;
        }
        const float* wr = ex[m].deq.data() + (size_t(e) * n_out + o) * n_in;
        double exact = 0, mag = 0;
        for (int64_t i = 0; i < n_in; ++i) exact += double(wr[i]) * xv[i], mag += std::fabs(double(wr[i]) * xv[i]);
        // Against the dequantized weights and x as the kernel sees it: float32 rounding in a
        // different order only (as matvec_test: 2e-5 of sum |w x|).
        ASSERT_NEAR(g, exact, 2e-5 * mag + 1e-6) << "mat " << m << " pair " << p << " row " << o;
      }
    }
}

const ggml_type k_types[] = {ggml_type::f32,  ggml_type::f16,  ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0,
                             ggml_type::q5_1, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k};

class moe_types : public ::testing::TestWithParam<ggml_type> {};

TEST_P(moe_types, matvec_matches_cpu) {
  REQUIRE_GPU();
  const ggml_type t = GetParam();
  // 256 inputs: 8-lane sub-warps for K-quants; 768: 16 lanes (the down projection's shape);
  // 2048: whole warps (gate/up). n_out not a multiple of the rows per group.
  check_matvec(t, 128, 256, 21, 1, 8, 0, 1, false);
  check_matvec(t, 4, 768, 37, 3, 2, 0, 2, false);
  check_matvec(t, 8, 768, 40, 8, 8, 768, 1, false);
  check_matvec(t, 16, 2048, 19, 2, 4, 0, 2, true);
  check_matvec(t, 6, 512, 33, 5, 1, 512 + 32, 1, false);
}

TEST(moe, swiglu_q8_feeds_down_projection) {
  REQUIRE_GPU();
  const int rows = 10, n = 768, n_expert = 12, n_out = 64, n_tok = 1, k = 10;
  const auto g = randoms(size_t(rows * n), 3, -3.f, 3.f), u = randoms(size_t(rows * n), 4);
  dev<float> dg(g), du(u), h(size_t(rows * n)), ya(size_t(rows * n_out)), yb(size_t(rows * n_out));
  dev<uint8_t> work(moe_matvec_work_bytes(n, rows)), work2(moe_matvec_work_bytes(n, rows));
  ASSERT_EQ(launch_moe_swiglu_q8(dg.p, du.p, h.p, rows, n, work.p, nullptr), cudaSuccess);
  const auto hh = h.host();
  for (int i = 0; i < rows * n; ++i) {
    const float want = g[i] / (1.f + std::exp(-g[i])) * u[i];
    ASSERT_NEAR(hh[i], want, 1e-6f * std::fabs(want) + 1e-7f) << i;  // expf vs exp: ulps
  }
  const auto ex = make_experts(ggml_type::q4_k, n_expert, n, n_out, 9);
  dev<uint8_t> w(ex.q);
  dev<int32_t> ids(random_ids(n_tok, k, n_expert, 2));
  const moe_matvec_output o{w.p, ya.p}, o2{w.p, yb.p};
  ASSERT_EQ(launch_moe_matvec_multi(ggml_type::q4_k, &o, 1, ex.stride, n_expert, n, n_out, nullptr, n, true, n_tok, k,
                                    ids.p, work.p, nullptr),
            cudaSuccess);
  ASSERT_EQ(launch_moe_matvec_multi(ggml_type::q4_k, &o2, 1, ex.stride, n_expert, n, n_out, h.p, n, false, n_tok, k,
                                    ids.p, work2.p, nullptr),
            cudaSuccess);
  // The same floats quantized by the same warp code: identical results.
  EXPECT_EQ(ya.host(), yb.host());
}

// The down projection with the combine in its launch against the CPU: x += sum_j w_j (W_j h_j)
// (+ the shared term), from h's int8 copy as launch_moe_matvec_multi makes it; a bad id makes its
// token's rows NaN and leaves the other tokens' right.
void check_down_combine(ggml_type t, int64_t n_in, int64_t n_out, int n_tok, bool shared, bool bad_id) {
  const int k = k_moe_down_combine_k, n_expert = 16, n_pairs = n_tok * k;
  SCOPED_TRACE(std::string(type_name(t)) + " " + std::to_string(n_out) + "x" + std::to_string(n_in) + " tok " +
               std::to_string(n_tok) + (shared ? " shared" : "") + (bad_id ? " bad id" : ""));
  ASSERT_TRUE(gpu_can_moe_down_combine(t, n_in, n_out, k));
  const experts ex = make_experts(t, n_expert, n_in, n_out, 61);
  const auto h = randoms(size_t(n_pairs * n_in), 62), r = randoms(size_t(n_tok * n_out), 63),
             wts = randoms(size_t(n_pairs), 64, 0.f, 1.f), ys = randoms(size_t(n_tok * n_out), 65),
             gl = randoms(size_t(n_tok), 66, -4.f, 4.f);
  const auto ids = random_ids(n_tok, k, n_expert, 67, bad_id);
  dev<uint8_t> w(ex.q), work(moe_matvec_work_bytes(n_in, n_pairs));
  dev<float> dh(h), dx(r), dw(wts), dys(ys), dgl(gl), y(size_t(n_pairs * n_out));
  dev<int32_t> di(ids);
  // The matvec's launch makes h's int8 copy in work, as decode's SwiGLU does.
  const moe_matvec_output o{w.p, y.p};
  ASSERT_EQ(launch_moe_matvec_multi(t, &o, 1, ex.stride, n_expert, n_in, n_out, dh.p, n_in, false, n_tok, k, di.p,
                                    work.p, nullptr),
            cudaSuccess);
  moe_shared_term sh;
  sh.y = dys.p, sh.gate_logits = dgl.p;
  ASSERT_EQ(launch_moe_down_combine(t, w.p, ex.stride, n_expert, n_in, n_out, work.p, n_tok, k, di.p, dw.p, dx.p,
                                    shared ? &sh : nullptr, nullptr),
            cudaSuccess);
  const auto got = dx.host();
  for (int tk = 0; tk < n_tok; ++tk) {
    bool bad = false;
    for (int j = 0; j < k; ++j) bad = bad || ids[tk * k + j] < 0 || ids[tk * k + j] >= n_expert;
    const double gate = 1.0 / (1.0 + std::exp(-double(gl[tk])));
    for (int64_t row = 0; row < n_out; ++row) {
      const float g = got[tk * n_out + row];
      if (bad) {
        ASSERT_TRUE(std::isnan(g)) << "token " << tk << " row " << row << " (invalid id)";
        continue;
      }
      double exact = r[tk * n_out + row], tol = 1e-6 * std::fabs(exact) + 1e-6;
      for (int j = 0; j < k; ++j) {
        const int p = tk * k + j;
        const auto xv = as_seen(h.data() + p * n_in, n_in, true);
        const float* wr = ex.deq.data() + (size_t(ids[p]) * n_out + row) * n_in;
        double dot = 0, mag = 0;
        for (int64_t i = 0; i < n_in; ++i) dot += double(wr[i]) * xv[i], mag += std::fabs(double(wr[i]) * xv[i]);
        exact += wts[p] * dot;
        // The mat-vec's tolerance (2e-5 of sum |w x|) a product, and the combine's roundings.
        tol += wts[p] * (2e-5 * mag) + 1e-6 * std::fabs(wts[p] * dot);
      }
      if (shared) exact += gate * ys[tk * n_out + row], tol += 1e-6 * std::fabs(gate * ys[tk * n_out + row]);
      ASSERT_NEAR(g, exact, tol) << "token " << tk << " row " << row;
    }
  }
}

TEST(moe, down_combine_matches_cpu) {
  REQUIRE_GPU();
  for (ggml_type t : {ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k, ggml_type::q8_0, ggml_type::q4_0}) {
    check_down_combine(t, 768, 64, 1, false, false);  // Qwen3-30B-A3B's down: 768 inputs
    check_down_combine(t, 512, 38, 3, true, false);   // Qwen3.5-35B-A3B's: 512, with the shared term
    check_down_combine(t, 256, 16, 8, true, true);
  }
}

TEST(moe, down_combine_rejects_bad_arguments) {
  REQUIRE_GPU();
  dev<uint8_t> w(size_t(1 << 16)), work(moe_matvec_work_bytes(256, 64));
  dev<float> x(size_t(4096)), wts(size_t(64));
  dev<int32_t> ids(size_t(64));
  const auto q4k = ggml_type::q4_k;
  EXPECT_FALSE(gpu_can_moe_down_combine(q4k, 256, 64, 4));   // k other than 8
  EXPECT_FALSE(gpu_can_moe_down_combine(q4k, 128, 64, 8));   // n_in not a multiple of 256
  EXPECT_FALSE(gpu_can_moe_down_combine(ggml_type::f32, 256, 64, 8));  // float x
  EXPECT_EQ(launch_moe_down_combine(q4k, w.p, 4096, 4, 256, 4, work.p, 9, 8, ids.p, wts.p, x.p, nullptr, nullptr),
            cudaErrorInvalidValue);  // too many tokens
  moe_shared_term sh;
  sh.y = x.p;  // no logits
  EXPECT_EQ(launch_moe_down_combine(q4k, w.p, 4096, 4, 256, 4, work.p, 1, 8, ids.p, wts.p, x.p, &sh, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launch_moe_down_combine(q4k, w.p + 1, 4096, 4, 256, 4, work.p, 1, 8, ids.p, wts.p, x.p, nullptr, nullptr),
            cudaErrorMisalignedAddress);
}

TEST(moe, matvec_rejects_bad_arguments) {
  REQUIRE_GPU();
  dev<uint8_t> w(size_t(1 << 16)), work(moe_matvec_work_bytes(256, 64));
  dev<float> x(size_t(4096)), y(size_t(4096));
  dev<int32_t> ids(size_t(64));
  const auto q4k = ggml_type::q4_k;
  EXPECT_EQ(launch_moe_matvec(q4k, w.p, 4096, 4, 128, 4, x.p, 0, 1, 2, ids.p, y.p, work.p, nullptr),
            cudaErrorInvalidValue);  // n_in not a multiple of 256
  EXPECT_EQ(launch_moe_matvec(q4k, w.p, 4096, 4, 256, 4, x.p, 0, 9, 2, ids.p, y.p, work.p, nullptr),
            cudaErrorInvalidValue);  // too many tokens
  EXPECT_EQ(launch_moe_matvec(q4k, w.p, 4096, 4, 256, 4, x.p, 0, 1, 17, ids.p, y.p, work.p, nullptr),
            cudaErrorInvalidValue);  // k
  EXPECT_EQ(launch_moe_matvec(q4k, w.p, 4096, 4, 256, 4, x.p, 128, 1, 2, ids.p, y.p, work.p, nullptr),
            cudaErrorInvalidValue);  // x_stride < n_in
  EXPECT_EQ(launch_moe_matvec(q4k, w.p, 4096, 4, 256, 4, x.p, 0, 1, 2, ids.p, y.p, nullptr, nullptr),
            cudaErrorInvalidValue);  // no workspace
  EXPECT_EQ(launch_moe_matvec(q4k, w.p, 4100, 4, 256, 4, x.p, 0, 1, 2, ids.p, y.p, work.p, nullptr),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_moe_matvec(q4k, w.p + 2, 4096, 4, 256, 4, x.p, 0, 1, 2, ids.p, y.p, work.p, nullptr),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_moe_matvec(ggml_type::bf16, w.p, 4096, 4, 256, 4, x.p, 0, 1, 2, ids.p, y.p, work.p, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// The launch with the SwiGLU in it (launch_moe_matvec_swiglu) against gate and up by
// launch_moe_matvec_multi, then launch_moe_swiglu_q8: the same bits in h and in h's int8 copy,
// invalid ids (NaN rows) included.
void check_matvec_swiglu(ggml_type t, int n_expert, int64_t n_in, int64_t n_out, int n_tok, int k, bool bad_id,
                         bool any_waves = false) {
  const std::string what = std::string(type_name(t)) + " E " + std::to_string(n_expert) + " " +
                           std::to_string(n_out) + "x" + std::to_string(n_in) + " tok " + std::to_string(n_tok) +
                           " k " + std::to_string(k) + (bad_id ? " bad id" : "") + (any_waves ? " any waves" : "");
  SCOPED_TRACE(what);
  const experts gate = make_experts(t, n_expert, n_in, n_out, 70), up = make_experts(t, n_expert, n_in, n_out, 970);
  const int n_pairs = n_tok * k;
  auto x = randoms(size_t(n_tok * n_in), 78);
  std::fill(x.begin(), x.begin() + 32, 0.f);  // an all-zero block (d = 0)
  dev<uint8_t> wg(gate.q), wu(up.q), xw(moe_matvec_work_bytes(n_in, n_tok));
  dev<uint8_t> hw1(moe_matvec_work_bytes(n_out, n_pairs)), hw2(moe_matvec_work_bytes(n_out, n_pairs));
  dev<float> dx(x), g(size_t(n_pairs * n_out)), u(size_t(n_pairs * n_out)), h2(size_t(n_pairs * n_out));
  dev<int32_t> ids(random_ids(n_tok, k, n_expert, 6, bad_id));
  const moe_matvec_output two[2] = {{wg.p, g.p}, {wu.p, u.p}};
  // The reference leaves x's int8 copy in xw, which the fused launch then reads.
  ASSERT_EQ(launch_moe_matvec_multi(t, two, 2, gate.stride, n_expert, n_in, n_out, dx.p, 0, false, n_tok, k, ids.p,
                                    xw.p, nullptr),
            cudaSuccess);
  ASSERT_EQ(launch_moe_swiglu_q8(g.p, u.p, g.p, n_pairs, int(n_out), hw1.p, nullptr), cudaSuccess);
  dev<float> scratch(size_t(n_pairs * n_out));
  const moe_matvec_output fused[2] = {{wg.p, h2.p}, {wu.p, scratch.p}};
  ASSERT_TRUE(gpu_can_moe_matvec_swiglu(t, n_out));
  // any_waves: the fused kernel even past one wave of blocks (its grid-stride loop), else the
  // launcher's own choice.
  if (any_waves) setenv("TANDEM_MOE_SWIGLU_ANY_WAVES", "1", 1);
  const cudaError_t e =
      launch_moe_matvec_swiglu(t, fused, gate.stride, n_expert, n_in, n_out, xw.p, n_tok, k, ids.p, hw2.p, nullptr);
  unsetenv("TANDEM_MOE_SWIGLU_ANY_WAVES");
  ASSERT_EQ(e, cudaSuccess);
  // The same bits, or NaN in both (an invalid pair's rows: which NaN the arithmetic leaves is
  // not specified).
  const auto same = [](const float* a, const float* b, size_t n, const char* what) {
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
      ASSERT_EQ(std::memcmp(a + i, b + i, sizeof(float)), 0) << what << " " << i << ": " << a[i] << " vs " << b[i];
    }
  };
  const auto ha = g.host(), hb = h2.host();
  same(ha.data(), hb.data(), ha.size(), "h");
  const auto w1 = hw1.host(), w2 = hw2.host();
  const matvec_qx q1 = matvec_x_parts(hw1.p, n_out, n_pairs);
  const size_t q_bytes = size_t(n_pairs * n_out), ds_at = size_t(reinterpret_cast<uint8_t*>(q1.ds) - hw1.p);
  ASSERT_EQ(reinterpret_cast<uint8_t*>(q1.q), hw1.p);
  ASSERT_TRUE(std::equal(w1.begin(), w1.begin() + q_bytes, w2.begin())) << "h's int8 values";
  const size_t n_ds = size_t(n_pairs * n_out / 32) * 2;  // (d, d sum q) per block
  same(reinterpret_cast<const float*>(w1.data() + ds_at), reinterpret_cast<const float*>(w2.data() + ds_at), n_ds,
       "h's scales");
  if (bad_id) {
    const int p = n_pairs / 2;  // random_ids' invalid pair
    ASSERT_TRUE(std::isnan(hb[size_t(p) * n_out])) << "the invalid pair's rows are NaN";
  }
}

TEST_P(moe_types, matvec_swiglu_is_matvec_then_swiglu_bits) {
  REQUIRE_GPU();
  const ggml_type t = GetParam();
  if (!int8_activations(t)) {
    EXPECT_FALSE(gpu_can_moe_matvec_swiglu(t, 64));
    return;
  }
  // 256 inputs: 8-lane sub-warps for K-quants (one pass a unit); 768: 16 lanes; 2048: whole
  // warps (two passes a unit). The Qwen shapes: 512 (Qwen3.5-35B) and 768 (Qwen3-30B) rows; the
  // 35B's one token is 128 units, one wave on an H200 (132 SMs, one block each).
  check_matvec_swiglu(t, 128, 256, 64, 1, 8, false);
  check_matvec_swiglu(t, 4, 768, 96, 3, 2, false);
  check_matvec_swiglu(t, 16, 2048, 512, 1, 8, true);
  check_matvec_swiglu(t, 32, 2048, 768, 8, 8, false);        // 1,536 units: the two launches
  check_matvec_swiglu(t, 32, 2048, 768, 8, 8, false, true);  // the same fused, blocks taking several
  check_matvec_swiglu(t, 6, 512, 32, 5, 1, true);
  check_matvec_swiglu(t, 6, 512, 32, 5, 1, true, true);
}

INSTANTIATE_TEST_SUITE_P(all, moe_types, ::testing::ValuesIn(k_types),
                         [](const auto& info) { return std::string(type_name(info.param)); });

TEST(moe, matvec_swiglu_rejects_bad_arguments) {
  REQUIRE_GPU();
  dev<uint8_t> w(size_t(1 << 16)), xw(moe_matvec_work_bytes(256, 8)), hw(moe_matvec_work_bytes(64, 16));
  dev<float> h(size_t(4096)), u(size_t(4096));
  dev<int32_t> ids(size_t(64), 0);
  const auto q4k = ggml_type::q4_k;
  const moe_matvec_output gu[2] = {{w.p, h.p}, {w.p, u.p}};
  EXPECT_FALSE(gpu_can_moe_matvec_swiglu(q4k, 48));  // rows not a multiple of 32
  EXPECT_FALSE(gpu_can_moe_matvec_swiglu(ggml_type::f16, 64));
  EXPECT_EQ(launch_moe_matvec_swiglu(q4k, gu, 4096, 4, 256, 48, xw.p, 1, 2, ids.p, hw.p, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launch_moe_matvec_swiglu(ggml_type::f32, gu, 4096, 4, 256, 64, xw.p, 1, 2, ids.p, hw.p, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launch_moe_matvec_swiglu(q4k, gu, 4096, 4, 256, 64, xw.p, 9, 2, ids.p, hw.p, nullptr),
            cudaErrorInvalidValue);  // too many tokens
  EXPECT_EQ(launch_moe_matvec_swiglu(q4k, gu, 4096, 4, 256, 64, nullptr, 1, 2, ids.p, hw.p, nullptr),
            cudaErrorInvalidValue);  // no x copy
  EXPECT_EQ(launch_moe_matvec_swiglu(q4k, gu, 4096, 4, 256, 64, xw.p, 1, 2, ids.p, nullptr, nullptr),
            cudaErrorInvalidValue);  // no room for h's copy
  EXPECT_EQ(launch_moe_matvec_swiglu(q4k, gu, 4096, 4, 256, 64, xw.p + 4, 1, 2, ids.p, hw.p, nullptr),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_moe_matvec_swiglu(q4k, gu, 4100, 4, 256, 64, xw.p, 1, 2, ids.p, hw.p, nullptr),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_moe_matvec_swiglu(q4k, gu, 4096, 4, 256, 64, xw.p, 1, 2, ids.p, hw.p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ---- Benchmarks ---------------------------------------------------------------------------

// The Qwen3-30B-A3B and Qwen3.5-35B-A3B expert shapes, Q4_K (128 experts x 768 x 2048 and 256 x
// 512 x 2048), gate/up fused, 1, 4 and 8 tokens, top-8, from CUDA graphs (so also capturable):
// GB/s of the active expert bytes; the SwiGLU as its own launch against launch_moe_matvec_swiglu
// (its choice, and the fused kernel at any waves); launch_matvec on a dense matrix of the same
// active rows. Several layer copies (> L2).
TEST(big, moe_decode_bandwidth) {
  REQUIRE_GPU();
  const int k = 8, layers = 6;
  const int64_t n_in = 2048;
  for (const auto& [n_expert, n_ff] : {std::pair<int, int64_t>{128, 768}, std::pair<int, int64_t>{256, 512}}) {
    const size_t rb = *row_bytes(ggml_type::q4_k, n_in), stride = rb * n_ff;
    const auto tile = quantize_matrix(ggml_type::q4_k, randoms(size_t(n_in * 64), 1), n_in, 64);
    std::vector<uint8_t> all(stride * n_expert * layers);
    for (size_t i = 0; i < all.size(); i += tile.size())
      std::copy_n(tile.begin(), std::min(tile.size(), all.size() - i), all.begin() + i);
    dev<uint8_t> wg(all), wu(all), work(moe_matvec_work_bytes(n_in, 8)), hwork(moe_matvec_work_bytes(n_ff, 8 * k));
    dev<float> x(randoms(size_t(n_in * 8), 2)), yg(size_t(8 * k * n_ff)), yu(size_t(8 * k * n_ff));
    for (int n_tok : {1, 4, 8}) {
      dev<int32_t> ids(random_ids(n_tok, k, n_expert, 3));
      const auto outs = [&](int i) {
        const size_t off = stride * n_expert * (i % layers);
        return std::pair<moe_matvec_output, moe_matvec_output>{{wg.p + off, yg.p}, {wu.p + off, yu.p}};
      };
      const double us = time_us([&](int i, cudaStream_t s) {
        const auto [og, ou] = outs(i);
        const moe_matvec_output o[2] = {og, ou};
        launch_moe_matvec_multi(ggml_type::q4_k, o, 2, stride, n_expert, n_in, n_ff, x.p, 0, false, n_tok, k, ids.p,
                                work.p, s);
      }, true);
      const double bytes = 2.0 * n_tok * k * stride;  // upper bound: repeated experts across tokens count twice
      std::printf("moe %d x %lld gate+up q4_k tok %d: %.1f us, %.0f GB/s of pair bytes\n", n_expert,
                  static_cast<long long>(n_ff), n_tok, us, bytes / us / 1e3);
      // The SwiGLU, from the copy of x the launch above left in work.
      const double both = time_us([&](int i, cudaStream_t s) {
        const auto [og, ou] = outs(i);
        const moe_matvec_output o[2] = {og, ou};
        launch_moe_matvec_multi(ggml_type::q4_k, o, 2, stride, n_expert, n_in, n_ff, x.p, 0, true, n_tok, k, ids.p,
                                work.p, s);
        launch_moe_swiglu_q8(yg.p, yu.p, yg.p, n_tok * k, int(n_ff), hwork.p, s);
      }, true);
      const auto fused = [&](bool any_waves) {
        if (any_waves) setenv("TANDEM_MOE_SWIGLU_ANY_WAVES", "1", 1);
        const double t = time_us([&](int i, cudaStream_t s) {
          const auto [og, ou] = outs(i);
          const moe_matvec_output o[2] = {og, ou};
          launch_moe_matvec_swiglu(ggml_type::q4_k, o, stride, n_expert, n_in, n_ff, work.p, n_tok, k, ids.p, hwork.p,
                                   s);
        }, true);
        unsetenv("TANDEM_MOE_SWIGLU_ANY_WAVES");
        return t;
      };
      const double chosen = fused(false), forced = fused(true);
      std::printf("moe %d x %lld gate+up+swiglu q4_k tok %d: two launches %.1f us, launch_moe_matvec_swiglu %.1f us, "
                  "fused at any waves %.1f us\n", n_expert, static_cast<long long>(n_ff), n_tok, both, chosen, forced);
    }
    const double dense = time_us([&](int i, cudaStream_t s) {
      const size_t off = stride * n_expert * (i % layers);
      launch_matvec(ggml_type::q4_k, wg.p + off, n_in, 2 * k * n_ff, x.p, 1, yg.p, work.p, s);
    }, true);
    std::printf("dense launch_matvec same active rows: %.1f us, %.0f GB/s\n", dense, 2.0 * k * stride / dense / 1e3);
  }
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
}

// The down projection with its combine, one token, as decode runs it: the Qwen3-30B-A3B and
// Qwen3.5-35B-A3B experts (the latter with its shared term), against a dense mat-vec over the same
// active bytes.
TEST(big, moe_down_combine_bandwidth) {
  REQUIRE_GPU();
  const int k = k_moe_down_combine_k, layers = 6;
  const int64_t n_out = 2048;
  struct shape {
    int n_expert;
    int64_t n_ff;
    bool shared;
  };
  for (const ggml_type t : {ggml_type::q4_k, ggml_type::q6_k})
    for (const shape& sh : {shape{128, 768, false}, shape{256, 512, true}}) {
      const size_t rb = *row_bytes(t, sh.n_ff), stride = rb * n_out;
      const auto tile = quantize_matrix(t, randoms(size_t(sh.n_ff * 64), 1), sh.n_ff, 64);
      std::vector<uint8_t> all(stride * sh.n_expert * layers);
      for (size_t i = 0; i < all.size(); i += tile.size())
        std::copy_n(tile.begin(), std::min(tile.size(), all.size() - i), all.begin() + i);
      dev<uint8_t> w(all), work(moe_matvec_work_bytes(sh.n_ff, k));
      dev<float> h(randoms(size_t(k * sh.n_ff), 2)), y(size_t(k * n_out)), out(randoms(size_t(n_out), 3)),
          wts(randoms(size_t(k), 4, 0.f, 1.f)), ys(randoms(size_t(n_out), 5)), gl(randoms(1, 6));
      dev<int32_t> ids(random_ids(1, k, sh.n_expert, 7));
      const moe_matvec_output o{w.p, y.p};  // makes h's int8 copy in work, as decode's SwiGLU does
      ASSERT_EQ(launch_moe_matvec_multi(t, &o, 1, stride, sh.n_expert, sh.n_ff, n_out, h.p, sh.n_ff, false, 1, k,
                                        ids.p, work.p, nullptr),
                cudaSuccess);
      moe_shared_term term;
      term.y = ys.p, term.gate_logits = gl.p;
      const double us = time_us([&](int i, cudaStream_t s) {
        launch_moe_down_combine(t, w.p + stride * sh.n_expert * (i % layers), stride, sh.n_expert, sh.n_ff, n_out,
                                work.p, 1, k, ids.p, wts.p, out.p, sh.shared ? &term : nullptr, s, true);
      }, true);
      const double dense = time_us([&](int i, cudaStream_t s) {
        launch_matvec(t, w.p + stride * sh.n_expert * (i % layers), sh.n_ff, k * n_out, h.p, 1, y.p, work.p, s);
      }, true);
      const double bytes = double(k) * stride;
      std::printf("moe %d x %lld down+combine %s%s tok 1: %.2f us, %.0f GB/s; dense launch_matvec same bytes %.2f us, "
                  "%.0f GB/s\n", sh.n_expert, static_cast<long long>(sh.n_ff), std::string(type_name(t)).c_str(),
                  sh.shared ? " shared" : "", us, bytes / us / 1e3, dense, bytes / dense / 1e3);
    }
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace tandem
