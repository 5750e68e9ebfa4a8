// Mixture-of-experts routing (kernels/moe_route.h): launch_moe_route's rule with deliberate ties,
// and decode's fused router mat-vec + selection against launch_matvec(F32) + launch_moe_route and
// a CPU reference (ties, NaN, repeated launches and graph replays, bad arguments). The benchmark
// (big.*) prints microseconds per layer fused and unfused. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/matvec.h"
#include "kernels/moe.h"
#include "kernels/moe_route.h"
#include "kernel_test_util.h"

namespace tandem {
namespace {

using test::dev;
using test::randoms;
using test::time_us;

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

// ---- launch_moe_router_route ----------------------------------------------------------------

// One fused launch's outputs, copied back.
struct fused_out {
  std::vector<int32_t> ids;
  std::vector<float> w, gate, logits;
};

// Device inputs of a fused launch: the router (n_expert rows), the gate row and up to 8 tokens.
struct router_inputs {
  int n_expert;
  int64_t n_embd;
  std::vector<float> router, gate, x;
  dev<float> d_router, d_gate, d_x;
  router_inputs(int e, int64_t n, uint32_t seed)
      : n_expert(e),
        n_embd(n),
        router(randoms(size_t(e) * size_t(n), seed, -0.1f, 0.1f)),
        gate(randoms(size_t(n), seed + 1, -0.1f, 0.1f)),
        x(randoms(size_t(k_moe_matvec_max_tokens) * size_t(n), seed + 2)),
        d_router(router),
        d_gate(gate),
        d_x(x) {}
  void upload() {
    ASSERT_EQ(cudaMemcpy(d_router.p, router.data(), router.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_gate.p, gate.data(), gate.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d_x.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
};

fused_out run_fused(const router_inputs& in, int n_tok, int k, bool renorm, bool with_gate) {
  dev<int32_t> ids(size_t(n_tok) * k);
  dev<float> w(size_t(n_tok) * k), gate(static_cast<size_t>(n_tok)), logits(size_t(n_tok) * in.n_expert);
  dev<uint8_t> work(moe_router_route_work_bytes(n_tok, in.n_expert), 0);
  EXPECT_EQ(launch_moe_router_route(in.d_router.p, with_gate ? in.d_gate.p : nullptr, in.d_x.p, n_tok, in.n_embd,
                                    in.n_expert, k, renorm, ids.p, w.p, with_gate ? gate.p : nullptr, logits.p,
                                    work.p, nullptr),
            cudaSuccess);
  return {ids.host(), w.host(), gate.host(), logits.host()};
}

// The fused launch's selection is launch_moe_route's on the logits it produced, bit for bit.
void expect_same_selection_as_route(const fused_out& f, int n_tok, int n_expert, int k, bool renorm,
                                    const std::string& what) {
  dev<float> l(f.logits), w(size_t(n_tok) * k);
  dev<int32_t> ids(size_t(n_tok) * k);
  ASSERT_EQ(launch_moe_route(l.p, n_tok, n_expert, k, renorm, ids.p, w.p, nullptr), cudaSuccess);
  EXPECT_EQ(f.ids, ids.host()) << what;
  EXPECT_EQ(f.w, w.host()) << what;
}

// Double-precision dot product and its tolerance for a float32 sum in any blocked order: each of
// the <= ~170 additions on a path to the result rounds by <= 2^-24 of at most sum |w x|, so
// 1e-5 * sum |w x| bounds either GPU order (the fused kernel's depth is 4 * ceil(n_embd / 1024)
// + 13, launch_matvec's similar) with room to spare.
void dot_ref(const float* w, const float* x, int64_t n, double& ref, double& tol) {
  double s = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) s += double(w[i]) * x[i], mag += std::fabs(double(w[i]) * x[i]);
  ref = s, tol = 1e-5 * mag + 1e-30;
}

// Fused against launch_matvec(F32) + launch_moe_route (and a second launch_matvec for the gate).
// Their logits sum in different orders: both within tol of the double reference. Ids must match
// exactly at a slot whose logit is separated from both neighbours in the reference order by more
// than 2 tol (then neither order can swap it); weights where the whole selection matched, within
// the logit error's effect on exp and the softmax / renorm sums (8 tol relative) plus rounding.
void check_against_unfused(router_inputs& in, int n_tok, int k, bool renorm, bool with_gate, int& compared,
                           int& skipped) {
  const int E = in.n_expert;
  const std::string what = "E " + std::to_string(E) + " n_tok " + std::to_string(n_tok) + " k " + std::to_string(k) +
                           (renorm ? " renorm" : "") + (with_gate ? " gate" : "");
  const fused_out f = run_fused(in, n_tok, k, renorm, with_gate);
  expect_same_selection_as_route(f, n_tok, E, k, renorm, what);
  dev<float> l(size_t(n_tok) * E), w(size_t(n_tok) * k), g(size_t(1));
  dev<int32_t> ids(size_t(n_tok) * k);
  ASSERT_EQ(launch_matvec(ggml_type::f32, in.d_router.p, in.n_embd, E, in.d_x.p, n_tok, l.p, nullptr, nullptr),
            cudaSuccess);
  ASSERT_EQ(launch_moe_route(l.p, n_tok, E, k, renorm, ids.p, w.p, nullptr), cudaSuccess);
  const auto bl = l.host(), bw = w.host();
  const auto bi = ids.host();
  for (int t = 0; t < n_tok; ++t) {
    const float* xt = in.x.data() + size_t(t) * in.n_embd;
    std::vector<double> ref(E), tol(E);
    double tmax = 0;
    for (int e = 0; e < E; ++e) {
      dot_ref(in.router.data() + size_t(e) * in.n_embd, xt, in.n_embd, ref[e], tol[e]);
      tmax = std::max(tmax, tol[e]);
      ASSERT_NEAR(f.logits[t * E + e], ref[e], tol[e]) << what << " tok " << t << " expert " << e;
      ASSERT_NEAR(bl[t * E + e], ref[e], tol[e]) << what << " (launch_matvec) tok " << t << " expert " << e;
    }
    if (with_gate) {
      double gr, gt;
      dot_ref(in.gate.data(), xt, in.n_embd, gr, gt);
      ASSERT_NEAR(f.gate[t], gr, gt) << what << " gate tok " << t;
      ASSERT_EQ(launch_matvec(ggml_type::f32, in.d_gate.p, in.n_embd, 1, in.d_x.p + t * in.n_embd, 1, g.p, nullptr,
                              nullptr),
                cudaSuccess);
      ASSERT_NEAR(f.gate[t], g.host()[0], 2 * gt) << what << " gate vs launch_matvec tok " << t;
    }
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ref[a] > ref[b]; });
    const auto apart = [&](int a, int b) {
      return b < 0 || b >= E || std::fabs(ref[order[a]] - ref[order[b]]) > 2 * tmax;
    };
    bool all = true;
    for (int j = 0; j < k; ++j) {
      if (apart(j, j - 1) && apart(j, j + 1)) {
        ASSERT_EQ(f.ids[t * k + j], bi[t * k + j]) << what << " tok " << t << " slot " << j;
        ++compared;
      } else {
        all = false, ++skipped;
      }
    }
    if (!all) continue;
    for (int j = 0; j < k; ++j)
      ASSERT_NEAR(f.w[t * k + j], bw[t * k + j], bw[t * k + j] * (8 * tmax + 1e-5)) << what << " tok " << t;
  }
}

TEST(moe_route, router_route_matches_matvec_then_route) {
  REQUIRE_GPU();
  int compared = 0, skipped = 0;
  for (int E : {128, 256, 60}) {
    router_inputs in(E, 2048, 300 + E);
    for (int n_tok = 1; n_tok <= k_moe_matvec_max_tokens; ++n_tok)
      for (int k : {8, 1})
        for (bool renorm : {false, true})
          for (bool gate : {false, true}) check_against_unfused(in, n_tok, k, renorm, gate, compared, skipped);
  }
  std::printf("ids compared %d, skipped (logits closer than the tolerance) %d\n", compared, skipped);
  EXPECT_GT(compared, 20 * skipped);  // the rule must not skip its way out of checking
}

// A token's logits do not depend on the batch (the summation order depends on n_embd only), and
// sizes off the common path: n_embd not a multiple of 32 (100), and past what the kernel loads
// ahead of its wait (8196 floats: the loop over the rest), against the double reference.
TEST(moe_route, router_route_odd_sizes_and_batch_independence) {
  REQUIRE_GPU();
  for (int64_t n_embd : {int64_t(100), int64_t(2048), int64_t(8196)}) {
    router_inputs in(60, n_embd, 17 + uint32_t(n_embd));
    const fused_out all = run_fused(in, k_moe_matvec_max_tokens, 4, true, true);
    for (int n_tok : {1, 2, 3, 5, 8}) {
      const std::string what = "n_embd " + std::to_string(n_embd) + " n_tok " + std::to_string(n_tok);
      const fused_out f = run_fused(in, n_tok, 4, true, true);
      expect_same_selection_as_route(f, n_tok, 60, 4, true, what);
      EXPECT_TRUE(std::equal(f.logits.begin(), f.logits.end(), all.logits.begin())) << what;
      EXPECT_TRUE(std::equal(f.gate.begin(), f.gate.end(), all.gate.begin())) << what;
      EXPECT_TRUE(std::equal(f.ids.begin(), f.ids.end(), all.ids.begin())) << what;
      for (int t = 0; t < n_tok; ++t)
        for (int e = 0; e < 60; ++e) {
          double ref, tol;
          dot_ref(in.router.data() + size_t(e) * n_embd, in.x.data() + size_t(t) * n_embd, n_embd, ref, tol);
          ASSERT_NEAR(f.logits[t * 60 + e], ref, tol) << what << " tok " << t << " expert " << e;
        }
    }
  }
}

// Exact ties (identical router rows give bitwise-equal logits) go to the lower id; a router row
// holding a NaN gives NaN logits, never selected. x positive so the planted rows lead.
TEST(moe_route, router_route_ties_and_nan) {
  REQUIRE_GPU();
  const int E = 128, k = 8;
  const int64_t n = 2048;
  router_inputs in(E, n, 5);
  for (auto& v : in.x) v = std::fabs(v) + 0.1f;
  // Logits about 1230 * the row's value, the random rows' within +-6: weights well above 0.
  std::fill_n(in.router.begin() + 9 * n, n, 0.02f);  // top
  std::fill_n(in.router.begin() + 5 * n, n, 0.01f);  // tied second: 5 before 40
  std::fill_n(in.router.begin() + 40 * n, n, 0.01f);
  std::fill_n(in.router.begin() + 7 * n, n, 0.05f);  // would lead but for the NaN
  in.router[7 * n + 100] = NAN;
  std::copy_n(in.router.begin() + 90 * n, n, in.router.begin() + 91 * n);  // a random tie
  in.upload();
  for (int n_tok : {1, 8})
    for (bool renorm : {false, true}) {
      const fused_out f = run_fused(in, n_tok, k, renorm, false);
      const std::string what = "n_tok " + std::to_string(n_tok) + (renorm ? " renorm" : "");
      expect_same_selection_as_route(f, n_tok, E, k, renorm, what);
      for (int t = 0; t < n_tok; ++t) {
        EXPECT_TRUE(std::isnan(f.logits[t * E + 7])) << what;
        EXPECT_EQ(f.logits[t * E + 5], f.logits[t * E + 40]) << what;
        EXPECT_EQ(f.logits[t * E + 90], f.logits[t * E + 91]) << what;
        EXPECT_EQ(f.ids[t * k + 0], 9) << what;
        EXPECT_EQ(f.ids[t * k + 1], 5) << what;
        EXPECT_EQ(f.ids[t * k + 2], 40) << what;
        EXPECT_EQ(f.w[t * k + 1], f.w[t * k + 2]) << what;
        EXPECT_GT(f.w[t * k + 2], 0.f) << what;
        for (int j = 0; j < k; ++j) EXPECT_NE(f.ids[t * k + j], 7) << what;
      }
    }
}

// The completion counter goes back to 0: back-to-back launches, replays of a captured graph and a
// smaller batch on a workspace sized for 8 tokens all give the same bits, every output rewritten.
TEST(moe_route, router_route_repeats_and_graph_replays) {
  REQUIRE_GPU();
  const int E = 128, k = 8, nt = k_moe_matvec_max_tokens;
  router_inputs in(E, 2048, 77);
  dev<int32_t> ids(size_t(nt) * k);
  dev<float> w(size_t(nt) * k), gate(static_cast<size_t>(nt));
  dev<uint8_t> work(moe_router_route_work_bytes(nt, E), 0);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const auto launch = [&](int n_tok) {
    return launch_moe_router_route(in.d_router.p, in.d_gate.p, in.d_x.p, n_tok, in.n_embd, E, k, true, ids.p, w.p,
                                   gate.p, nullptr, work.p, s);
  };
  const auto poison = [&] {
    ASSERT_EQ(cudaMemsetAsync(ids.p, 0x7f, ids.n * 4, s), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(w.p, 0x7f, w.n * 4, s), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(gate.p, 0x7f, gate.n * 4, s), cudaSuccess);
  };
  const auto counter = [&] {
    unsigned c = 1;
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&c, work.p, sizeof c, cudaMemcpyDeviceToHost), cudaSuccess);
    return c;
  };
  ASSERT_EQ(launch(nt), cudaSuccess);
  const auto ids0 = ids.host();
  const auto gate0 = gate.host();
  const auto w0 = w.host();
  EXPECT_EQ(counter(), 0u);
  for (int r = 0; r < 2; ++r) {
    poison();
    ASSERT_EQ(launch(nt), cudaSuccess);
    ASSERT_EQ(launch(nt), cudaSuccess);  // twice in a row on the stream
    EXPECT_EQ(ids.host(), ids0) << "repeat " << r;
    EXPECT_EQ(w.host(), w0) << "repeat " << r;
    EXPECT_EQ(gate.host(), gate0) << "repeat " << r;
  }
  cudaGraph_t g;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(launch(nt), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec, g, 0), cudaSuccess);
  for (int r = 0; r < 3; ++r) {
    poison();
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    EXPECT_EQ(ids.host(), ids0) << "replay " << r;
    EXPECT_EQ(w.host(), w0) << "replay " << r;
    EXPECT_EQ(gate.host(), gate0) << "replay " << r;
    EXPECT_EQ(counter(), 0u) << "replay " << r;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  // One token on the 8-token workspace: token 0's results again.
  poison();
  ASSERT_EQ(launch(1), cudaSuccess);
  const auto ids1 = ids.host();
  const auto gate1 = gate.host();
  const auto w1 = w.host();
  EXPECT_TRUE(std::equal(ids1.begin(), ids1.begin() + k, ids0.begin()));
  EXPECT_TRUE(std::equal(w1.begin(), w1.begin() + k, w0.begin()));
  EXPECT_EQ(gate1[0], gate0[0]);
  EXPECT_EQ(counter(), 0u);
  cudaStreamDestroy(s);
}

TEST(moe_route, router_route_rejects_bad_arguments) {
  REQUIRE_GPU();
  const int E = 64;
  const int64_t n = 256;
  dev<float> r(size_t(E) * n + 4), g(size_t(n) + 4), x(size_t(9) * n + 4), w(size_t(9) * 17), gl(size_t(9));
  dev<int32_t> ids(size_t(9) * 17);
  dev<uint8_t> work(moe_router_route_work_bytes(8, k_moe_max_experts), 0);
  const auto call = [&](const float* rp, const float* gp, const float* xp, int n_tok, int64_t n_embd, int n_expert,
                        int k, int32_t* ip, float* wp, float* glp, void* wk) {
    return launch_moe_router_route(rp, gp, xp, n_tok, n_embd, n_expert, k, true, ip, wp, glp, nullptr, wk, nullptr);
  };
  EXPECT_EQ(call(r.p, g.p, x.p, 2, n, E, 8, ids.p, w.p, gl.p, work.p), cudaSuccess);
  EXPECT_EQ(call(r.p, g.p, x.p, 9, n, E, 8, ids.p, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, x.p, -1, n, E, 8, ids.p, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, x.p, 1, n, k_moe_max_experts + 1, 8, ids.p, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, x.p, 1, n, 0, 1, ids.p, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, x.p, 1, n, 4, 5, ids.p, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, x.p, 1, n, E, k_moe_max_k + 1, ids.p, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, x.p, 1, n, E, 0, ids.p, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, x.p, 1, n - 2, E, 8, ids.p, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, x.p, 1, 0, E, 8, ids.p, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(nullptr, g.p, x.p, 1, n, E, 8, ids.p, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, nullptr, 1, n, E, 8, ids.p, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, x.p, 1, n, E, 8, nullptr, w.p, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, x.p, 1, n, E, 8, ids.p, nullptr, gl.p, work.p), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p, g.p, x.p, 1, n, E, 8, ids.p, w.p, nullptr, work.p), cudaErrorInvalidValue);  // gate, no out
  EXPECT_EQ(call(r.p, g.p, x.p, 1, n, E, 8, ids.p, w.p, gl.p, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(call(r.p + 1, g.p, x.p, 1, n, E, 8, ids.p, w.p, gl.p, work.p), cudaErrorMisalignedAddress);
  EXPECT_EQ(call(r.p, g.p + 2, x.p, 1, n, E, 8, ids.p, w.p, gl.p, work.p), cudaErrorMisalignedAddress);
  EXPECT_EQ(call(r.p, g.p, x.p + 3, 1, n, E, 8, ids.p, w.p, gl.p, work.p), cudaErrorMisalignedAddress);
  EXPECT_EQ(call(r.p, g.p, x.p, 1, n, E, 8, ids.p, w.p, gl.p, work.p + 2), cudaErrorMisalignedAddress);
  EXPECT_EQ(call(r.p, nullptr, x.p, 1, n, E, 8, ids.p, w.p, nullptr, work.p), cudaSuccess);  // no gate
  EXPECT_EQ(call(nullptr, nullptr, nullptr, 0, n, E, 8, nullptr, nullptr, nullptr, nullptr), cudaSuccess);
  EXPECT_EQ(moe_router_route_work_bytes(9, E), 0u);
  EXPECT_EQ(moe_router_route_work_bytes(1, k_moe_max_experts + 1), 0u);
  EXPECT_EQ(moe_router_route_work_bytes(1, 0), 0u);
  EXPECT_GE(moe_router_route_work_bytes(8, 128), size_t(8 * 128 * 4));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// ---- Benchmark ------------------------------------------------------------------------------

// Decode routing per layer, one token, n_embd 2048, top-8: the fused launch against
// launch_matvec(F32) [+ launch_matvec for the shared-expert gate] + launch_moe_route. Each timed
// call runs 48 layers (a Qwen3-30B-A3B's worth) on router copies cycled over > 256 MiB (over 4x
// any L2), replayed from a CUDA graph, so the weights come from HBM and launch gaps are those of
// a captured decode step.
TEST(big, moe_router_route_latency) {
  REQUIRE_GPU();
  const int layers = 48, k = 8;
  const int64_t n = 2048;
  struct shape {
    int n_expert;
    bool gate;
    const char* model;
  };
  for (const shape& sh : {shape{128, false, "Qwen3-30B-A3B"}, shape{256, true, "Qwen3.5-35B-A3B"}}) {
    const int E = sh.n_expert;
    const size_t one = size_t(E) * n;  // floats per router copy
    const int copies = int((size_t(256) << 20) / (one * 4) + 1);
    const auto r1 = randoms(one, 11, -0.1f, 0.1f);
    dev<float> router(one * copies), gate(randoms(size_t(n) * copies, 12, -0.1f, 0.1f)), x(randoms(size_t(n), 13));
    for (int c = 0; c < copies; ++c)
      ASSERT_EQ(cudaMemcpy(router.p + one * c, r1.data(), one * 4, cudaMemcpyHostToDevice), cudaSuccess);
    dev<float> logits(static_cast<size_t>(E)), w(static_cast<size_t>(k)), gl(static_cast<size_t>(1));
    dev<int32_t> ids(static_cast<size_t>(k));
    dev<uint8_t> work(moe_router_route_work_bytes(1, E), 0);
    const double fused = time_us([&](int i, cudaStream_t s) {
      for (int l = 0; l < layers; ++l) {
        const int c = (i * layers + l) % copies;
        launch_moe_router_route(router.p + one * c, sh.gate ? gate.p + n * c : nullptr, x.p, 1, n, E, k, true, ids.p,
                                w.p, sh.gate ? gl.p : nullptr, nullptr, work.p, s);
      }
    }, true) / layers;
    const double unfused = time_us([&](int i, cudaStream_t s) {
      for (int l = 0; l < layers; ++l) {
        const int c = (i * layers + l) % copies;
        launch_matvec(ggml_type::f32, router.p + one * c, n, E, x.p, 1, logits.p, nullptr, s);
        if (sh.gate) launch_matvec(ggml_type::f32, gate.p + n * c, n, 1, x.p, 1, gl.p, nullptr, s);
        launch_moe_route(logits.p, 1, E, k, true, ids.p, w.p, s);
      }
    }, true) / layers;
    std::printf("moe router+route %s (%d experts%s, n_embd 2048, 1 token, top-8): fused %.2f us/layer, "
                "launch_matvec%s + launch_moe_route %.2f us/layer\n",
                sh.model, E, sh.gate ? " + shared gate" : "", fused, sh.gate ? " x2" : "", unfused);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

}  // namespace
}  // namespace tandem
