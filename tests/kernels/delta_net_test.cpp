// The Gated DeltaNet kernels (kernels/delta_net.h) against the CPU reference ops
// (backend/cpu/delta_net_ops.h) on random inputs with fixed seeds: multi-run batches (1, 7 and 70
// tokens, shuffled state slots, one run from position 0 whose stale state must be ignored),
// nonzero initial states, every dk the rule kernel is built for. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/delta_net_ops.h"
#include "kernels/delta_net.h"
#include "kernel_test_util.h"

namespace tandem {
namespace {

using test::dev;
using test::randoms;

// Passes when |got - ref| <= atol + rtol * |ref| everywhere; prints the worst error either way
// and the first mismatches (index, got, ref) on failure.
void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref, float atol,
                  float rtol) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double worst = 0.0, worst_ratio = 0.0;
  size_t at = 0, bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(ref[i]));
    const double allowed = atol + rtol * std::fabs(double(ref[i]));
    const double ratio = !std::isfinite(err) ? 1e30 : (allowed > 0 ? err / allowed : (err > 0 ? 1e30 : 0.0));
    if (ratio > worst_ratio) worst_ratio = ratio, worst = err, at = i;
    if (!(err <= allowed) && ++bad <= 5)
      ADD_FAILURE() << what << ": index " << i << " got " << got[i] << " expected " << ref[i] << " (|err| " << err
                    << " > " << allowed << ")";
  }
  std::printf("[%s] %zu values, max |err| %.3g at %zu (%.3g of the tolerance), %zu outside atol %.1g rtol %.1g\n",
              what.c_str(), ref.size(), worst, at, worst_ratio, bad, double(atol), double(rtol));
  EXPECT_EQ(bad, 0u) << what;
}

// One run of a batch: its token count, state slot and first position (0: start from zero).
struct run_spec {
  int n, slot, pos0;
};

// The runs array the launchers read: consecutive batch rows in the given order.
std::vector<int32_t> runs_array(const std::vector<run_spec>& rs, int* total) {
  std::vector<int32_t> r;
  int t0 = 0;
  for (const run_spec& s : rs) {
    r.insert(r.end(), {t0, s.n, s.slot, s.pos0});
    t0 += s.n;
  }
  *total = t0;
  return r;
}

int max_tokens(const std::vector<run_spec>& rs) {
  int m = 0;
  for (const run_spec& s : rs) m = std::max(m, s.n);
  return m;
}

// Three runs: 7 tokens in slot 3, 1 token in slot 0, 70 tokens in slot 2 starting at position 0
// (slot 2 holds stale values that must be ignored); slot 1 is no run's and must stay untouched.
const std::vector<run_spec> k_mixed = {{7, 3, 9}, {1, 0, 40}, {70, 2, 0}};
constexpr int k_slots = 4;

// ---------------------------------------------------------------------------------------------

// CPU expectation of the conv over a batch: per run, the slot's state (zero from position 0).
void conv_reference(const std::vector<float>& x, int64_t stride, const std::vector<float>& w, int C, int K,
                    const std::vector<run_spec>& rs, std::vector<float>& state, std::vector<float>& out) {
  const size_t per_slot = size_t(K - 1) * C;
  int t0 = 0;
  for (const run_spec& r : rs) {
    std::vector<float> st(state.begin() + r.slot * per_slot, state.begin() + (r.slot + 1) * per_slot);
    if (r.pos0 == 0) std::fill(st.begin(), st.end(), 0.f);
    causal_conv1d_silu(x.data() + t0 * stride, stride, w.data(), r.n, C, K, st.data(), out.data() + size_t(t0) * C);
    std::copy(st.begin(), st.end(), state.begin() + r.slot * per_slot);
    t0 += r.n;
  }
}

// The conv on the mixed batch for several K, with the one-thread-per-run path (max_tokens 0), the
// token-sliced path, and a max_tokens bound far above the real runs (more slices than tokens).
TEST(dn_conv_kernel, matches_cpu_over_runs) {
  REQUIRE_GPU();
  const int C = 200;  // not a multiple of the block width
  const int64_t stride = C + 5;
  for (int K : {4, 2, 1, 8}) {
    for (int bound : {0, 70, 1000}) {
      int T = 0;
      const auto runs = runs_array(k_mixed, &T);
      const auto x = randoms(size_t(T) * stride, 11 + K);
      const auto w = randoms(size_t(C) * K, 12 + K);
      std::vector<float> state = randoms(size_t(k_slots) * (K - 1) * C, 13 + K, -2.f, 2.f);
      std::vector<float> ref_out(size_t(T) * C);
      std::vector<float> ref_state = state;
      conv_reference(x, stride, w, C, K, k_mixed, ref_state, ref_out);

      dev<float> dx(x), dw(w), dst(state), dout(size_t(T) * C);
      dev<int32_t> druns(runs);
      const dn_runs dr{druns.p, int(k_mixed.size()), bound};
      ASSERT_EQ(launch_dn_conv(dx.p, stride, dw.p, C, K, dst.p, dr, dout.p, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::string tag = "conv K=" + std::to_string(K) + " max_tokens=" + std::to_string(bound);
      expect_close(tag + " out", dout.host(), ref_out, 1e-5f, 1e-5f);
      // The state is copies of inputs: exact, and slot 1 (no run's) keeps its old values.
      expect_close(tag + " state", dst.host(), ref_state, 0.f, 0.f);
    }
  }
}

// Decode-shaped: many one-token runs, each continuing its own slot.
TEST(dn_conv_kernel, decode_runs) {
  REQUIRE_GPU();
  const int C = 10240, K = 4, n_slots = 12;
  const std::vector<run_spec> rs = {{1, 5, 3}, {1, 0, 17}, {1, 11, 1}, {1, 7, 0}, {1, 2, 250}, {1, 9, 2}};
  int T = 0;
  const auto runs = runs_array(rs, &T);
  const auto x = randoms(size_t(T) * C, 21), w = randoms(size_t(C) * K, 22);
  std::vector<float> state = randoms(size_t(n_slots) * (K - 1) * C, 23), ref_state = state;
  std::vector<float> ref_out(size_t(T) * C);
  conv_reference(x, C, w, C, K, rs, ref_state, ref_out);
  dev<float> dx(x), dw(w), dst(state), dout(size_t(T) * C);
  dev<int32_t> druns(runs);
  ASSERT_EQ(launch_dn_conv(dx.p, C, dw.p, C, K, dst.p, dn_runs{druns.p, int(rs.size()), 1}, dout.p, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close("conv decode out", dout.host(), ref_out, 1e-5f, 1e-5f);
  expect_close("conv decode state", dst.host(), ref_state, 0.f, 0.f);
}

// ---------------------------------------------------------------------------------------------

TEST(dn_rms_norm_gated_kernel, matches_cpu) {
  REQUIRE_GPU();
  for (int d : {128, 64, 40}) {
    const int64_t n = 37;
    const auto o = randoms(size_t(n) * d, 51, -2.f, 2.f), z = randoms(size_t(n) * d, 52, -6.f, 6.f);
    const auto w = randoms(size_t(d), 53, 0.5f, 1.5f);
    std::vector<float> ref(o.size());
    rms_norm_gated(o.data(), w.data(), z.data(), ref.data(), n, d, 1e-6f);
    dev<float> dov(o), dz(z), dw(w), dout(o.size());
    ASSERT_EQ(launch_rms_norm_gated(dov.p, dw.p, dz.p, dout.p, n, d, 1e-6f, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_close("rms_norm_gated d=" + std::to_string(d), dout.host(), ref, 1e-6f, 1e-5f);
  }
}

TEST(gated_attention_kernels, split_q_gate_and_sigmoid_mul) {
  REQUIRE_GPU();
  const int T = 5, H = 3, D = 64;
  const auto qg = randoms(size_t(T) * H * 2 * D, 61);
  std::vector<float> q_ref(size_t(T) * H * D), g_ref(q_ref.size());
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < D; ++i) {
        q_ref[(size_t(t) * H + h) * D + i] = qg[size_t(t) * H * 2 * D + size_t(h) * 2 * D + i];
        g_ref[(size_t(t) * H + h) * D + i] = qg[size_t(t) * H * 2 * D + size_t(h) * 2 * D + D + i];
      }
  dev<float> dqg(qg), dq(q_ref.size()), dg(q_ref.size());
  ASSERT_EQ(launch_split_q_gate(dqg.p, T, H, D, dq.p, dg.p, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close("split_q_gate q", dq.host(), q_ref, 0.f, 0.f);
  expect_close("split_q_gate gate", dg.host(), g_ref, 0.f, 0.f);

  const auto x = randoms(1000, 62, -3.f, 3.f), gate = randoms(1000, 63, -9.f, 9.f);
  std::vector<float> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = x[i] * (1.f / (1.f + std::exp(-gate[i])));
  dev<float> dx(x), dgate(gate);
  ASSERT_EQ(launch_sigmoid_mul(dx.p, dgate.p, int64_t(x.size()), nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close("sigmoid_mul", dx.host(), ref, 1e-6f, 1e-5f);
}

// ---------------------------------------------------------------------------------------------

struct rule_shape {
  int Hk, Hv, dk, dv;
};

// Conv-output-like rows per token: q (Hk*dk), k (Hk*dk), v (Hv*dv), then 3 floats of padding
// (an odd row stride), raw: the kernel L2-normalises q and k itself.
std::vector<float> rule_inputs(int T, int64_t stride, uint32_t seed) { return randoms(size_t(T) * stride, seed); }

// The gated delta rule on the GPU, its gates and q/k norm folded in, against the CPU's
// l2_norm_rows + delta_net_gates + gated_delta_rule_recurrent run by run.
void check_rule(const rule_shape& s, const std::vector<run_spec>& rs, int n_slots, uint32_t seed) {
  int T = 0;
  const auto runs = runs_array(rs, &T);
  const int64_t stride = 2 * int64_t(s.Hk) * s.dk + int64_t(s.Hv) * s.dv + 3;
  const auto u = rule_inputs(T, stride, seed);
  // Raw gate inputs: alpha + dt_bias spans both sides of softplus's threshold (20).
  const auto alpha = randoms(size_t(T) * s.Hv, seed + 1, -24.f, 24.f);
  const auto braw = randoms(size_t(T) * s.Hv, seed + 2, -6.f, 6.f);
  const auto decay = randoms(size_t(s.Hv), seed + 4, -2.f, -0.02f), bias = randoms(size_t(s.Hv), seed + 5, -2.f, 2.f);
  const size_t per_slot = size_t(s.Hv) * s.dk * s.dv;
  const auto S0 = randoms(per_slot * n_slots, seed + 3, -0.5f, 0.5f);

  auto un = u;  // the CPU composition: norm, gates, then the recurrent rule
  for (int t = 0; t < T; ++t) l2_norm_rows(un.data() + t * stride, 2 * s.Hk, s.dk, s.dk, 1e-6f);
  std::vector<float> g(alpha.size()), beta(alpha.size());
  delta_net_gates(alpha.data(), braw.data(), decay.data(), bias.data(), T, s.Hv, g.data(), beta.data());
  std::vector<float> ref_out(size_t(T) * s.Hv * s.dv), ref_S = S0;
  int t0 = 0;
  for (const run_spec& r : rs) {
    std::vector<float> st(ref_S.begin() + r.slot * per_slot, ref_S.begin() + (r.slot + 1) * per_slot);
    if (r.pos0 == 0) std::fill(st.begin(), st.end(), 0.f);
    delta_rule_args a;
    a.q = un.data() + t0 * stride;
    a.k = a.q + s.Hk * s.dk;
    a.qk_stride = stride;
    a.v = a.q + 2 * s.Hk * s.dk;
    a.v_stride = stride;
    a.g = g.data() + size_t(t0) * s.Hv;
    a.beta = beta.data() + size_t(t0) * s.Hv;
    a.T = r.n;
    a.Hk = s.Hk, a.Hv = s.Hv, a.dk = s.dk, a.dv = s.dv;
    a.S = st.data();
    a.out = ref_out.data() + size_t(t0) * s.Hv * s.dv;
    gated_delta_rule_recurrent(a);
    std::copy(st.begin(), st.end(), ref_S.begin() + r.slot * per_slot);
    t0 += r.n;
  }

  dev<float> du(u), dalpha(alpha), dbraw(braw), ddecay(decay), dbias(bias);
  dev<int32_t> druns(runs);
  dn_rule_args a;
  a.q = du.p;
  a.k = du.p + s.Hk * s.dk;
  a.qk_stride = stride;
  a.v = du.p + 2 * s.Hk * s.dk;
  a.v_stride = stride;
  a.a_decay = ddecay.p, a.dt_bias = dbias.p;
  a.Hk = s.Hk, a.Hv = s.Hv, a.dk = s.dk, a.dv = s.dv;
  // b and a side by side in one [T][2 Hv] buffer, as the backend has them when one mat-vec job
  // computes both.
  std::vector<float> packed(size_t(T) * 2 * s.Hv);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < s.Hv; ++h) {
      packed[size_t(t) * 2 * s.Hv + h] = braw[size_t(t) * s.Hv + h];
      packed[size_t(t) * 2 * s.Hv + s.Hv + h] = alpha[size_t(t) * s.Hv + h];
    }
  dev<float> dpacked(packed);
  // Both block shapes (the bound on run length picks narrow blocks for decode, wide ones else),
  // and the packed gate inputs.
  for (int variant = 0; variant < 3; ++variant) {
    const int bound = variant == 1 ? 0 : max_tokens(rs);
    const bool pack = variant == 2;
    a.beta = pack ? dpacked.p : dbraw.p;
    a.alpha = pack ? dpacked.p + s.Hv : dalpha.p;
    a.gate_stride = pack ? 2 * s.Hv : 0;
    dev<float> dS2(S0), dout2(ref_out.size());
    a.S = dS2.p, a.out = dout2.p;
    ASSERT_EQ(launch_dn_rule(a, dn_runs{druns.p, int(rs.size()), bound}, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    char tag[112];
    std::snprintf(tag, sizeof tag, "rule Hk=%d Hv=%d dk=%d dv=%d runs=%zu bound=%d%s", s.Hk, s.Hv, s.dk, s.dv,
                  rs.size(), bound, pack ? " packed gates" : "");
    // fp32 with a different summation order (warp trees vs sequential) over up to 300 recurrent
    // steps; outputs and states are O(1). A wrong index or a missed sync shows as O(1) errors.
    expect_close(std::string(tag) + " out", dout2.host(), ref_out, 1e-4f, 1e-4f);
    expect_close(std::string(tag) + " state", dS2.host(), ref_S, 1e-4f, 1e-4f);
  }
}

// Tiny heads, two v-heads per k-head (h % Hk), the mixed batch.
TEST(dn_rule_kernel, matches_cpu_tiny) {
  REQUIRE_GPU();
  check_rule({2, 4, 32, 32}, k_mixed, k_slots, 71);
}

// Every dk the kernel is instantiated for (32..256 in steps of 32) and dv of 1..8 column slices,
// including the odd-R ones (dk 96, 160, 224) that take scalar shared-memory loads.
TEST(dn_rule_kernel, matches_cpu_all_dk) {
  REQUIRE_GPU();
  for (int dk = 32; dk <= 256; dk += 32)
    for (int dv : {32, 64, 256}) check_rule({1, 3, dk, dv}, k_mixed, k_slots, 100 + dk + dv);
}

// The Qwen3.5-27B layer shape (Hk 16, Hv 48, dk = dv = 128) on the mixed batch.
TEST(dn_rule_kernel, matches_cpu_qwen35_shape) {
  REQUIRE_GPU();
  check_rule({16, 48, 128, 128}, k_mixed, k_slots, 81);
}

// Decode: one token per run, runs in shuffled slots, one of them fresh.
TEST(dn_rule_kernel, matches_cpu_decode_batch) {
  REQUIRE_GPU();
  const std::vector<run_spec> rs = {{1, 5, 3}, {1, 0, 17}, {1, 7, 1}, {1, 2, 0}, {1, 4, 250}, {1, 1, 2}};
  check_rule({16, 48, 128, 128}, rs, 8, 91);
}

// A run longer than several staging chunks (32 tokens) with a partial last chunk, dk 256 (chunks of 16).
TEST(dn_rule_kernel, matches_cpu_long_run) {
  REQUIRE_GPU();
  check_rule({2, 4, 128, 64}, {{300, 1, 12}}, 2, 95);
  check_rule({2, 4, 256, 32}, {{61, 0, 12}, {45, 1, 0}}, 2, 96);
}

// Bad shapes are refused before anything is launched (no device needed).
TEST(dn_launchers, reject_bad_shapes) {
  dn_rule_args a;
  a.Hk = 2, a.Hv = 4, a.dk = 48, a.dv = 32;
  a.l2_eps = 0.f;
  const dn_runs one0{reinterpret_cast<const int32_t*>(16), 1, 1};
  a.dk = 128;
  EXPECT_EQ(launch_dn_rule(a, one0, nullptr), cudaErrorInvalidValue);  // no positive eps
  a.dk = 48, a.l2_eps = 1e-6f;
  const dn_runs one{reinterpret_cast<const int32_t*>(16), 1, 1};
  EXPECT_EQ(launch_dn_rule(a, one, nullptr), cudaErrorInvalidValue);  // dk not a multiple of 32
  a.dk = 288;
  EXPECT_EQ(launch_dn_rule(a, one, nullptr), cudaErrorInvalidValue);  // dk > 256
  a.dk = 128, a.dv = 48;
  EXPECT_EQ(launch_dn_rule(a, one, nullptr), cudaErrorInvalidValue);  // dv not a multiple of 32
  a.dv = 32, a.Hk = 0;
  EXPECT_EQ(launch_dn_rule(a, one, nullptr), cudaErrorInvalidValue);
  a.Hk = 2;
  EXPECT_EQ(launch_dn_rule(a, dn_runs{nullptr, 1, 1}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_dn_rule(a, dn_runs{nullptr, 0, 0}, nullptr), cudaSuccess);  // nothing to do
  EXPECT_EQ(launch_dn_conv(nullptr, 8, nullptr, 8, 9, nullptr, one, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_dn_conv(nullptr, 8, nullptr, 8, 0, nullptr, one, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_dn_conv(nullptr, 4, nullptr, 8, 4, nullptr, one, nullptr, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace tandem
