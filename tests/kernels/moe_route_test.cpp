// Mixture-of-experts routing (kernels/moe_route.h): launch_moe_route's rule with deliberate ties,
// decode's norm and router in one launch against the two launches, and their argument checks.
// Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/layer_ops.h"
#include "kernels/matvec.h"
#include "kernels/moe_route.h"
#include "kernel_test_util.h"

namespace tandem {
namespace {

using test::dev;
using test::randoms;

// ---- launch_moe_route ---------------------------------------------------------------------

// The contract's rule: softmax, then the k best by (logit desc, id asc), weights renormalised.
void route_cpu(const float* l, int n_expert, int k, bool renorm, int32_t* ids, float* w) {
  float mx = -INFINITY;
  for (int e = 0; e < n_expert; ++e) mx = std::max(mx, l[e]);
  double sum = 0;
  for (int e = 0; e < n_expert; ++e) sum += std::exp(double(l[e]) - mx);
  std::vector<int> order(n_expert);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  double s = 0;
  for (int j = 0; j < k; ++j) ids[j] = order[j], w[j] = float(std::exp(double(l[order[j]]) - mx) / sum), s += w[j];
  if (renorm)
    for (int j = 0; j < k; ++j) w[j] = float(w[j] / s);
}

TEST(moe_route, route_matches_cpu_rule_with_ties) {
  REQUIRE_GPU();
  std::mt19937 rng(7);
  for (int n_expert : {4, 8, 60, 128, 512}) {
    for (int k : {1, 2, 4, 8, 16}) {
      if (k > n_expert) continue;
      for (bool renorm : {false, true}) {
        const int n_tok = 37;
        auto l = randoms(size_t(n_tok) * n_expert, 1000 + n_expert + k, -4.f, 4.f);
        // Ties: copies of other logits in the same row, one row entirely equal, and a top tie.
        for (int t = 0; t < n_tok; ++t) {
          float* row = l.data() + size_t(t) * n_expert;
          for (int c = 0; c < n_expert / 4; ++c) row[rng() % n_expert] = row[rng() % n_expert];
          if (t == 3) std::fill(row, row + n_expert, 0.5f);
          if (t == 5) row[n_expert - 1] = row[0] = 9.f;
          if (t == 7) {  // -0 and +0 tie as logits: the lower id first
            for (int e = 0; e < n_expert; ++e) row[e] = -1.f - float(e % 7);
            row[std::min(2, n_expert - 1)] = 0.f, row[1] = -0.f;
          }
        }
        dev<float> dl(l), dw(size_t(n_tok) * k);
        dev<int32_t> di(size_t(n_tok) * k);
        ASSERT_EQ(launch_moe_route(dl.p, n_tok, n_expert, k, renorm, di.p, dw.p, nullptr), cudaSuccess);
        const auto ids = di.host();
        const auto w = dw.host();
        std::vector<int32_t> rid(k);
        std::vector<float> rw(k);
        for (int t = 0; t < n_tok; ++t) {
          route_cpu(l.data() + size_t(t) * n_expert, n_expert, k, renorm, rid.data(), rw.data());
          for (int j = 0; j < k; ++j) {
            const std::string what = "E " + std::to_string(n_expert) + " k " + std::to_string(k) + " tok " +
                                     std::to_string(t) + " slot " + std::to_string(j);
            // Selection compares logits only: exact on both sides.
            ASSERT_EQ(ids[t * k + j], rid[j]) << what;
            // expf against exp in double, a float sum of up to 512 terms: a few ulps of the weight.
            ASSERT_NEAR(w[t * k + j], rw[j], 4e-6f * rw[j] + 1e-9f) << what;
          }
        }
      }
    }
  }
}

// Decode's FFN norm and float32 router in one launch against launch_rms_norm_q8 then the mat-vec:
// the same bits in xn and its int8 copy; the logits within float32's ordering error.
TEST(moe_route, router_norm_is_norm_then_router) {
  REQUIRE_GPU();
  for (int64_t n : {1024, 2048, 3072, 8192})
  for (int n_expert : {1, 128, 256})
  for (int n_tok : {1, 3, 8}) {
    SCOPED_TRACE("n " + std::to_string(n) + " experts " + std::to_string(n_expert) + " tokens " + std::to_string(n_tok));
    const auto x = randoms(size_t(n_tok * n), 41), nw = randoms(size_t(n), 42, 0.5f, 1.5f),
               router = randoms(size_t(n_expert * n), 43, -0.1f, 0.1f);
    dev<float> dx(x), dnw(nw), dr(router), xn1(size_t(n_tok * n)), xn2(size_t(n_tok * n)),
        l1(size_t(n_tok * n_expert)), l2(size_t(n_tok * n_expert));
    dev<uint8_t> work1(matvec_work_bytes(n, n_tok)), work2(matvec_work_bytes(n, n_tok)), mwork(matvec_work_bytes(n, n_tok));
    ASSERT_EQ(launch_rms_norm_q8(dx.p, dnw.p, xn1.p, n_tok, int(n), 1e-6f, work1.p, nullptr), cudaSuccess);
    ASSERT_EQ(launch_matvec(ggml_type::f32, dr.p, n, n_expert, xn1.p, n_tok, l1.p, mwork.p, nullptr), cudaSuccess);
    ASSERT_TRUE(moe_router_norm_fits(n_tok, n));
    ASSERT_EQ(launch_moe_router_norm(dx.p, dnw.p, 1e-6f, dr.p, n_expert, n, n_tok, l2.p, xn2.p, work2.p, nullptr),
              cudaSuccess);
    const auto a = xn1.host(), b = xn2.host();
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "xn";
    const matvec_qx q1 = matvec_x_parts(work1.p, n, n_tok);
    const size_t qbytes = size_t(reinterpret_cast<uint8_t*>(q1.ds) - work1.p) + size_t(n / 32 * n_tok) * sizeof(float2);
    std::vector<uint8_t> h1(qbytes), h2(qbytes);
    ASSERT_EQ(cudaMemcpy(h1.data(), work1.p, qbytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(h2.data(), work2.p, qbytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(h1, h2) << "int8 copy";
    const auto g1 = l1.host(), g2 = l2.host();
    for (int t = 0; t < n_tok; ++t)
      for (int e = 0; e < n_expert; ++e) {
        double mag = 0;
        for (int64_t i = 0; i < n; ++i) mag += std::fabs(double(router[e * n + i]) * a[t * n + i]);
        ASSERT_NEAR(g2[t * n_expert + e], g1[t * n_expert + e], 1e-5 * mag + 1e-7) << "token " << t << " expert " << e;
      }
  }
}

TEST(moe_route, router_norm_rejects_bad_arguments) {
  REQUIRE_GPU();
  dev<float> x(size_t(2048)), nw(size_t(2048)), r(size_t(8 * 2048)), l(size_t(8)), xn(size_t(2048));
  EXPECT_FALSE(moe_router_norm_fits(1, 1000));  // not a multiple of 32
  EXPECT_FALSE(moe_router_norm_fits(9, 2048));  // more tokens than a decode step
  EXPECT_FALSE(moe_router_norm_fits(1, 512));   // below the wide norm's rows
  EXPECT_EQ(launch_moe_router_norm(x.p, nw.p, 1e-6f, r.p, 8, 2048, 1, l.p, nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(launch_moe_router_norm(x.p, nw.p, 1e-6f, r.p + 1, 8, 2048, 1, l.p, xn.p, nullptr, nullptr),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_moe_router_norm(x.p, nw.p, 1e-6f, r.p, 8, 2048, 1, l.p, xn.p, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(moe_route, route_rejects_bad_sizes) {
  REQUIRE_GPU();
  dev<float> l(size_t(1024)), w(size_t(64));
  dev<int32_t> ids(size_t(64));
  EXPECT_EQ(launch_moe_route(l.p, 1, 513, 8, true, ids.p, w.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_moe_route(l.p, 1, 64, 17, true, ids.p, w.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_moe_route(l.p, 1, 4, 5, true, ids.p, w.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_moe_route(l.p, 0, 4, 2, true, ids.p, w.p, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace tandem
