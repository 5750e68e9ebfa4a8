// Mixture-of-experts routing (kernels/moe_route.h): launch_moe_route's rule with deliberate ties,
// and its argument checks. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

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
