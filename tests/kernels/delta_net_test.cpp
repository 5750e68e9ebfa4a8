// The Gated DeltaNet kernels (kernels/delta_net.h) against the CPU reference ops
// (backend/cpu/delta_net_ops.h) on random inputs with fixed seeds: multi-run batches (1, 7 and 70
// tokens, shuffled state slots, one run from position 0 whose stale state must be ignored),
// nonzero initial states, every dk the rule kernels are built for; the chunked rule also on runs
// around its chunk size, with both of its state kernels (fp32, tensor cores), and against the
// recurrent kernel, whose speed big.dn_rule_chunked_vs_recurrent compares. Skips without a CUDA device.
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

// Test hooks of kernels/delta_net_chunked.cu (see there): which kernels launch_dn_rule_chunked runs
// (parts: bit 0 kernel A, bit 1 kernel B), which kernel B (mma: 0 fp32, 1 tensor cores where it
// can run, -1 the default) and which kernel A (prep, likewise); one warp product through the
// kernels' tensor-core fragment helpers.
void dn_rule_chunked_debug(int parts, int mma, int prep = -1);
cudaError_t dn_chunked_mma_tile_test(const float* a, const float* at, const float* b, const float* bt,
                                     const float* s, const float* c0, float* c, cudaStream_t stream);

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

// y's int8 copy in blocks of 32 as quantize_x_warp makes it (the mat-vec's input): d = amax / 127,
// |q d - y| <= d / 2, ds.y = d sum q.
void expect_int8_copy(const std::string& what, const std::vector<float>& y, const std::vector<int8_t>& q,
                      const std::vector<float2>& ds) {
  for (size_t b = 0; b < y.size() / 32; ++b) {
    float amax = 0.f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(y[32 * b + i]));
    ASSERT_NEAR(ds[b].x, amax / 127.f, 1e-6f * amax) << what << " block " << b;
    for (int i = 0; i < 32; ++i) {
      ASSERT_LE(std::fabs(q[32 * b + i] * ds[b].x - y[32 * b + i]), 0.5f * ds[b].x + 1e-6f) << what << " block " << b;
      sum += q[32 * b + i];
    }
    ASSERT_NEAR(ds[b].y, ds[b].x * float(sum), 1e-5f * std::fabs(ds[b].x * float(sum)) + 1e-6f)
        << what << " block " << b;
  }
}

TEST(dn_rms_norm_gated_kernel, matches_cpu) {
  REQUIRE_GPU();
  for (int d : {128, 64, 40, 256, 320}) {  // 320: the loop form
    const int64_t n = 37;
    const auto o = randoms(size_t(n) * d, 51, -2.f, 2.f), z = randoms(size_t(n) * d, 52, -6.f, 6.f);
    const auto w = randoms(size_t(d), 53, 0.5f, 1.5f);
    std::vector<float> ref(o.size());
    rms_norm_gated(o.data(), w.data(), z.data(), ref.data(), n, d, 1e-6f);
    dev<float> dov(o), dz(z), dw(w), dout(o.size());
    ASSERT_EQ(launch_rms_norm_gated(dov.p, dw.p, dz.p, dout.p, n, d, 1e-6f, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    expect_close("rms_norm_gated d=" + std::to_string(d), dout.host(), ref, 1e-6f, 1e-5f);
    if (d % 32 != 0) continue;
    // With the int8 copy (the out projection's input): the same floats, and each 32-value block
    // as quantize_x_warp makes it: d = amax / 127, |q d - v| <= d / 2, ds.y = d sum q.
    const size_t nb = o.size() / 32;
    dev<int8_t> dq(o.size());
    dev<float2> dds(nb);
    dev<float> dout2(o.size());
    ASSERT_EQ(launch_rms_norm_gated(dov.p, dw.p, dz.p, dout2.p, n, d, 1e-6f, nullptr, dq.p, dds.p), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto y = dout2.host();
    expect_close("rms_norm_gated with int8 copy d=" + std::to_string(d), y, ref, 1e-6f, 1e-5f);
    expect_int8_copy("rms_norm_gated d=" + std::to_string(d), y, dq.host(), dds.host());
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
  // With the int8 copy for wo (1000 is no multiple of 32: refused; the first 992 values then).
  dev<float> dx2(x);
  dev<int8_t> dq8(x.size());
  dev<float2> dds8(x.size() / 32);
  EXPECT_EQ(launch_sigmoid_mul(dx2.p, dgate.p, int64_t(x.size()), nullptr, dq8.p, dds8.p), cudaErrorInvalidValue);
  const int64_t n32 = int64_t(x.size()) / 32 * 32;
  ASSERT_EQ(launch_sigmoid_mul(dx2.p, dgate.p, n32, nullptr, dq8.p, dds8.p), cudaSuccess);
  auto y = dx2.host();
  y.resize(size_t(n32));
  expect_close("sigmoid_mul with int8 copy", y, std::vector<float>(ref.begin(), ref.begin() + n32), 1e-6f, 1e-5f);
  auto q = dq8.host();
  q.resize(size_t(n32));
  expect_int8_copy("sigmoid_mul", y, q, dds8.host());
}

// ---------------------------------------------------------------------------------------------

struct rule_shape {
  int Hk, Hv, dk, dv;
};

// A rule test's inputs and their CPU expectation. Rows per token are conv-output-like: q (Hk*dk),
// k (Hk*dk), v (Hv*dv), then 3 floats of padding (an odd row stride), raw: the kernels L2-normalise
// q and k themselves. The expectation is the CPU's l2_norm_rows + delta_net_gates +
// gated_delta_rule_recurrent, run by run.
struct rule_case {
  rule_shape s;
  std::vector<run_spec> rs;
  int T = 0;
  int64_t stride = 0;
  std::vector<int32_t> runs;
  std::vector<float> u, alpha, braw, decay, bias, S0, ref_out, ref_S;
};

rule_case make_rule_case(const rule_shape& s, const std::vector<run_spec>& rs, int n_slots, uint32_t seed,
                         bool reference = true) {
  rule_case c;
  c.s = s, c.rs = rs;
  c.runs = runs_array(rs, &c.T);
  const int T = c.T;
  c.stride = 2 * int64_t(s.Hk) * s.dk + int64_t(s.Hv) * s.dv + 3;
  c.u = randoms(size_t(T) * c.stride, seed);
  // Raw gate inputs: alpha + dt_bias spans both sides of softplus's threshold (20).
  c.alpha = randoms(size_t(T) * s.Hv, seed + 1, -24.f, 24.f);
  c.braw = randoms(size_t(T) * s.Hv, seed + 2, -6.f, 6.f);
  c.decay = randoms(size_t(s.Hv), seed + 4, -2.f, -0.02f), c.bias = randoms(size_t(s.Hv), seed + 5, -2.f, 2.f);
  const size_t per_slot = size_t(s.Hv) * s.dk * s.dv;
  c.S0 = randoms(per_slot * n_slots, seed + 3, -0.5f, 0.5f);
  c.ref_out.assign(size_t(T) * s.Hv * s.dv, 0.f);
  c.ref_S = c.S0;
  if (!reference) return c;

  auto un = c.u;
  for (int t = 0; t < T; ++t) l2_norm_rows(un.data() + t * c.stride, 2 * s.Hk, s.dk, s.dk, 1e-6f);
  std::vector<float> g(c.alpha.size()), beta(c.alpha.size());
  delta_net_gates(c.alpha.data(), c.braw.data(), c.decay.data(), c.bias.data(), T, s.Hv, g.data(), beta.data());
  int t0 = 0;
  for (const run_spec& r : rs) {
    std::vector<float> st(c.ref_S.begin() + r.slot * per_slot, c.ref_S.begin() + (r.slot + 1) * per_slot);
    if (r.pos0 == 0) std::fill(st.begin(), st.end(), 0.f);
    delta_rule_args a;
    a.q = un.data() + t0 * c.stride;
    a.k = a.q + s.Hk * s.dk;
    a.qk_stride = c.stride;
    a.v = a.q + 2 * s.Hk * s.dk;
    a.v_stride = c.stride;
    a.g = g.data() + size_t(t0) * s.Hv;
    a.beta = beta.data() + size_t(t0) * s.Hv;
    a.T = r.n;
    a.Hk = s.Hk, a.Hv = s.Hv, a.dk = s.dk, a.dv = s.dv;
    a.S = st.data();
    a.out = c.ref_out.data() + size_t(t0) * s.Hv * s.dv;
    gated_delta_rule_recurrent(a);
    std::copy(st.begin(), st.end(), c.ref_S.begin() + r.slot * per_slot);
    t0 += r.n;
  }
  return c;
}

// Device copies of a case's inputs; args() points dn_rule_args at them, with the gate inputs
// separate or, as the backend has them when one mat-vec job computes both, b and a side by side
// in one [T][2 Hv] buffer.
struct rule_device {
  dev<float> u, alpha, braw, decay, bias, packed;
  dev<int32_t> runs;
  const rule_case& c;
  explicit rule_device(const rule_case& rc)
      : u(rc.u), alpha(rc.alpha), braw(rc.braw), decay(rc.decay), bias(rc.bias), packed(pack(rc)), runs(rc.runs),
        c(rc) {}
  static std::vector<float> pack(const rule_case& rc) {
    const int Hv = rc.s.Hv;
    std::vector<float> p(size_t(rc.T) * 2 * Hv);
    for (int t = 0; t < rc.T; ++t)
      for (int h = 0; h < Hv; ++h) {
        p[size_t(t) * 2 * Hv + h] = rc.braw[size_t(t) * Hv + h];
        p[size_t(t) * 2 * Hv + Hv + h] = rc.alpha[size_t(t) * Hv + h];
      }
    return p;
  }
  dn_rule_args args(bool pack_gates, float* S, float* out) const {
    const rule_shape& s = c.s;
    dn_rule_args a;
    a.q = u.p;
    a.k = u.p + s.Hk * s.dk;
    a.qk_stride = c.stride;
    a.v = u.p + 2 * s.Hk * s.dk;
    a.v_stride = c.stride;
    a.a_decay = decay.p, a.dt_bias = bias.p;
    a.Hk = s.Hk, a.Hv = s.Hv, a.dk = s.dk, a.dv = s.dv;
    a.beta = pack_gates ? packed.p : braw.p;
    a.alpha = pack_gates ? packed.p + s.Hv : alpha.p;
    a.gate_stride = pack_gates ? 2 * s.Hv : 0;
    a.S = S, a.out = out;
    return a;
  }
  dn_runs runs_with(int bound) const { return dn_runs{runs.p, int(c.rs.size()), bound}; }
};

std::string rule_tag(const char* what, const rule_case& c, int bound, bool pack) {
  char tag[128];
  std::snprintf(tag, sizeof tag, "%s Hk=%d Hv=%d dk=%d dv=%d runs=%zu bound=%d%s", what, c.s.Hk, c.s.Hv, c.s.dk,
                c.s.dv, c.rs.size(), bound, pack ? " packed gates" : "");
  return tag;
}

// The gated delta rule on the GPU, its gates and q/k norm folded in, against the CPU.
void check_rule(const rule_shape& s, const std::vector<run_spec>& rs, int n_slots, uint32_t seed) {
  const rule_case c = make_rule_case(s, rs, n_slots, seed);
  const rule_device d(c);
  // Both block shapes (the bound on run length picks narrow blocks for decode, wide ones else),
  // and the packed gate inputs.
  for (int variant = 0; variant < 3; ++variant) {
    const int bound = variant == 1 ? 0 : max_tokens(rs);
    const bool pack = variant == 2;
    dev<float> dS(c.S0), dout(c.ref_out.size());
    ASSERT_EQ(launch_dn_rule(d.args(pack, dS.p, dout.p), d.runs_with(bound), nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::string tag = rule_tag("rule", c, bound, pack);
    // fp32 with a different summation order (warp trees vs sequential) over up to 300 recurrent
    // steps; outputs and states are O(1). A wrong index or a missed sync shows as O(1) errors.
    expect_close(tag + " out", dout.host(), c.ref_out, 1e-4f, 1e-4f);
    expect_close(tag + " state", dS.host(), c.ref_S, 1e-4f, 1e-4f);
  }
}

// The chunked rule against the CPU's recurrent rule and against launch_dn_rule on the same inputs,
// with the run bound given and unknown (0: the launcher bounds runs by the batch), gates packed or
// not. The workspace starts poisoned (0x7f7f7f7f, ~3e38), so a read of anything kernel A did not
// write shows up as a huge error.
void check_rule_chunked(const rule_shape& s, const std::vector<run_spec>& rs, int n_slots, uint32_t seed) {
  const rule_case c = make_rule_case(s, rs, n_slots, seed);
  const rule_device d(c);
  dev<float> rS(c.S0), rout(c.ref_out.size());
  ASSERT_EQ(launch_dn_rule(d.args(false, rS.p, rout.p), d.runs_with(max_tokens(rs)), nullptr), cudaSuccess);
  const std::vector<float> rec_out = rout.host(), rec_S = rS.host();
  const size_t work_bytes = dn_rule_chunked_work_bytes(c.T, s.Hk, s.Hv, s.dk, s.dv);
  ASSERT_GT(work_bytes, 0u);
  // Both state kernels: the fp32 one and (sm_80+, where its shared memory fits) the tensor-core one,
  // after the tensor-core kernel A (where it can run, whatever the runs' lengths); then the fp32
  // kernel A, before the tensor-core kernel B.
  for (int variant = 0; variant < 9; ++variant) {
    const int bound = variant % 3 == 1 ? 0 : max_tokens(rs);
    const bool pack = variant % 3 == 2;
    const int mma = variant / 3 == 1 ? 0 : 1, prep = variant / 3 == 2 ? 0 : 1;
    dn_rule_chunked_debug(3, mma, prep);
    dev<float> dS(c.S0), dout(c.ref_out.size());
    dev<uint8_t> work(work_bytes);
    const cudaError_t launched =
        launch_dn_rule_chunked(d.args(pack, dS.p, dout.p), d.runs_with(bound), c.T, work.p, work_bytes, nullptr);
    dn_rule_chunked_debug(3, -1);
    ASSERT_EQ(launched, cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::string tag = rule_tag(prep == 0 ? "chunked rule (fp32 A, mma B)"
                                     : mma     ? "chunked rule (mma)"
                                               : "chunked rule (fp32 B)",
                                     c, bound, pack);
    // The CPU's own chunked form differs from its recurrent one by up to ~1e-5 of these O(1)
    // values (another summation order, a 64x64 triangular solve: tests/engine/backend's
    // delta_net_ops_test holds them to 1e-4), and a host emulation of these kernels matched the
    // CPU chunked form to ~1e-7. 1e-4 keeps a 10x margin; a wrong index, mask or sync gives
    // errors of 1e-2 and up. The tensor-core state kernel's 3xTF32 products carry ~2^-22 relative
    // error per term, as fp32 does, so the same bounds hold for it.
    const std::vector<float> out = dout.host(), S = dS.host();
    expect_close(tag + " out", out, c.ref_out, 1e-4f, 1e-4f);
    expect_close(tag + " state", S, c.ref_S, 1e-4f, 1e-4f);
    expect_close(tag + " out vs launch_dn_rule", out, rec_out, 1e-4f, 1e-4f);
    expect_close(tag + " state vs launch_dn_rule", S, rec_S, 1e-4f, 1e-4f);
  }
}

// The tensor-core kernels' fragment layouts (m16n8k8 tf32: A from a row-major block and from its
// transpose, B with row scales and from its transpose, C in and out) on one 16 x 8 x 8 product
// against a double loop, three times (c[0..127]: frag_a, frag_b; then frag_a_t; then frag_b_t);
// a wrong lane mapping moves whole values (errors of O(1)), 1xTF32 alone would err by ~1e-3 of
// these sums of eight products up to 4, and 3xTF32 by ~2^-22 of each product (a few 1e-6 at most).
TEST(dn_rule_chunked, mma_tile_layout) {
  REQUIRE_GPU();
  const auto a = randoms(16 * 8, 501, -2.f, 2.f), b = randoms(8 * 8, 502, -2.f, 2.f);
  const auto s = randoms(8, 503, 0.1f, 1.f), c0 = randoms(16 * 8, 504, -1.f, 1.f);
  std::vector<float> at(8 * 16), bt(8 * 8), ref(3 * 16 * 8);
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 8; ++k) at[k * 16 + r] = a[r * 8 + k];
  for (int k = 0; k < 8; ++k)
    for (int n = 0; n < 8; ++n) bt[n * 8 + k] = s[k] * b[k * 8 + n];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double acc = c0[r * 8 + n];
      for (int k = 0; k < 8; ++k) acc += double(a[r * 8 + k]) * double(s[k]) * double(b[k * 8 + n]);
      ref[r * 8 + n] = ref[128 + r * 8 + n] = ref[256 + r * 8 + n] = float(acc);
    }
  dev<float> da(a), dat(at), db(b), dbt(bt), ds(s), dc0(c0), dc(ref.size());
  const cudaError_t e = dn_chunked_mma_tile_test(da.p, dat.p, db.p, dbt.p, ds.p, dc0.p, dc.p, nullptr);
  if (e == cudaErrorNotSupported) GTEST_SKIP() << "tensor-core state kernel needs sm_80+";
  ASSERT_EQ(e, cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_close("mma tile (frag_a | frag_a_t | frag_b_t)", dc.host(), ref, 2e-5f, 1e-5f);
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

// Decode-sized runs (up to 8 tokens: the kernel whose warps split dk) for every dk and dv of one
// and three 32-column slices, two v-heads per k-head, one run from position 0.
TEST(dn_rule_kernel, matches_cpu_decode_all_dk) {
  REQUIRE_GPU();
  const std::vector<run_spec> rs = {{1, 2, 5}, {8, 0, 0}, {3, 1, 7}};
  for (int dk = 32; dk <= 256; dk += 32)
    for (int dv : {32, 96}) check_rule({2, 4, dk, dv}, rs, 3, 300 + dk + dv);
}

// A run longer than several staging chunks (32 tokens) with a partial last chunk, dk 256 (chunks of 16).
TEST(dn_rule_kernel, matches_cpu_long_run) {
  REQUIRE_GPU();
  check_rule({2, 4, 128, 64}, {{300, 1, 12}}, 2, 95);
  check_rule({2, 4, 256, 32}, {{61, 0, 12}, {45, 1, 0}}, 2, 96);
}

// The chunked rule on a batch of runs around the chunk size: 1 token from a nonzero state, 63
// (one short chunk), 64 from position 0 over a stale slot, 65 (a full chunk and a 1-token tail), 200
// from position 0 (three full chunks and a tail), 7; slot 6 is no run's and must stay untouched.
// Two v-heads per k-head (h % Hk).
const std::vector<run_spec> k_chunk_runs = {{1, 3, 9}, {63, 0, 40}, {64, 2, 0}, {65, 1, 5}, {200, 4, 0}, {7, 5, 3}};
constexpr int k_chunk_slots = 7;

TEST(dn_rule_chunked, matches_cpu_mixed_runs) {
  REQUIRE_GPU();
  check_rule_chunked({2, 4, 128, 128}, k_chunk_runs, k_chunk_slots, 201);
  check_rule_chunked({2, 4, 32, 64}, k_chunk_runs, k_chunk_slots, 202);
  check_rule_chunked({3, 2, 64, 32}, k_chunk_runs, k_chunk_slots, 203);  // fewer v-heads than k-heads
}

// Every dk the chunked kernels take (32..256) with narrow and wide dv.
TEST(dn_rule_chunked, matches_cpu_all_dk) {
  REQUIRE_GPU();
  const std::vector<run_spec> rs = {{70, 1, 3}, {130, 0, 0}};
  for (int dk = 32; dk <= 256; dk += 32)
    for (int dv : {32, 256}) check_rule_chunked({1, 3, dk, dv}, rs, 2, 300 + dk + dv);
}

// The Qwen3.5 layer shapes (16 k-heads, 32 or 48 v-heads, dk = dv = 128), a prefill-sized run
// continuing a state next to a fresh one.
TEST(dn_rule_chunked, matches_cpu_qwen35_shapes) {
  REQUIRE_GPU();
  check_rule_chunked({16, 32, 128, 128}, {{300, 1, 12}, {64, 0, 0}}, 2, 211);
  check_rule_chunked({16, 48, 128, 128}, {{129, 0, 0}}, 1, 212);
}

// Recurrent against chunked for one run of 16..2048 tokens of the Qwen3.5-35B-A3B layer shape
// (Hk 16, Hv 32, dk = dv = 128), us per launch and per token: where the backend's switch to the
// chunked rule (k_dn_chunked_min_tokens in cuda_hybrid_block.cpp) pays, and by how much at 2048.
// The chunked rule is timed with each state kernel (fp32: the CUDA-core kernel B, mma: the
// tensor-core one; the same on a pre-sm_80 device), and its two kernels alone: A (gates, norms,
// Gram products, the triangular solve; the tensor-core and the fp32 form) and B (the chunk-by-chunk
// state walk, on the work A left). Asserts only that the launches succeed and that the forms agree
// with the recurrent kernel.
TEST(big, dn_rule_chunked_vs_recurrent) {
  REQUIRE_GPU();
  const rule_shape s{16, 32, 128, 128};
  for (int n : {16, 32, 64, 128, 256, 512, 2048}) {
    const rule_case c = make_rule_case(s, {{n, 0, 7}}, 1, 400 + n, false);  // no CPU reference: it is slow
    const rule_device d(c);
    dev<float> S(c.S0), out_rec(c.ref_out.size()), out_chk(c.ref_out.size());
    const size_t work_bytes = dn_rule_chunked_work_bytes(n, s.Hk, s.Hv, s.dk, s.dv);
    dev<uint8_t> work(work_bytes, 0);
    const dn_rule_args rec = d.args(true, S.p, out_rec.p), chk = d.args(true, S.p, out_chk.p);
    cudaError_t err = cudaSuccess;
    const double us_rec = test::time_us([&](int, cudaStream_t st) {
      const cudaError_t e = launch_dn_rule(rec, d.runs_with(n), st);
      if (e != cudaSuccess) err = e;
    });
    // parts: 3 both kernels, 1 kernel A, 2 kernel B (on the work buffer the runs before left).
    auto time_chunked = [&](int parts, int mma, int prep = -1) {
      dn_rule_chunked_debug(parts, mma, prep);
      const double us = test::time_us([&](int, cudaStream_t st) {
        const cudaError_t e = launch_dn_rule_chunked(chk, d.runs_with(n), n, work.p, work_bytes, st);
        if (e != cudaSuccess) err = e;
      });
      dn_rule_chunked_debug(3, -1);
      return us;
    };
    const double us_fp32 = time_chunked(3, 0, 0), us_mma = time_chunked(3, 1, 1), us_def = time_chunked(3, -1);
    const double us_a = time_chunked(1, -1, 1), us_a32 = time_chunked(1, -1, 0);
    const double us_b32 = time_chunked(2, 0), us_bmma = time_chunked(2, 1);
    ASSERT_EQ(err, cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::printf("dn rule, %4d tokens, Hk %d Hv %d dk %d dv %d: recurrent %8.1f us (%.2f us/token), chunked fp32 %8.1f "
                "us (%.2fx), chunked mma %8.1f us (%.2f us/token, %.2fx; %.2fx the fp32 one)\n",
                n, s.Hk, s.Hv, s.dk, s.dv, us_rec, us_rec / n, us_fp32, us_rec / us_fp32, us_mma, us_mma / n,
                us_rec / us_mma, us_fp32 / us_mma);
    std::printf("    kernel A mma %8.1f us, kernel A fp32 %8.1f us, kernel B fp32 %8.1f us, kernel B mma %8.1f us; "
                "default choice %8.1f us\n",
                us_a, us_a32, us_b32, us_bmma, us_def);
    // Both ran from the same (by now much-updated) state many times; one more from S0 each to compare.
    dev<float> S1(c.S0);
    ASSERT_EQ(launch_dn_rule(d.args(true, S1.p, out_rec.p), d.runs_with(n), nullptr), cudaSuccess);
    const std::vector<float> ref_out = out_rec.host(), ref_S = S1.host();
    for (int mma : {0, 1, 2}) {  // 2: the fp32 kernel A, the tensor-core kernel B
      dev<float> S2(c.S0);
      dn_rule_chunked_debug(3, mma == 0 ? 0 : 1, mma == 2 ? 0 : 1);
      const cudaError_t e = launch_dn_rule_chunked(d.args(true, S2.p, out_chk.p), d.runs_with(n), n, work.p,
                                                   work_bytes, nullptr);
      dn_rule_chunked_debug(3, -1);
      ASSERT_EQ(e, cudaSuccess);
      const std::string tag = mma == 2 ? "chunked (fp32 A, mma B) vs recurrent"
                              : mma    ? "chunked (mma) vs recurrent"
                                       : "chunked (fp32 B) vs recurrent";
      expect_close(tag + " out", out_chk.host(), ref_out, 1e-4f, 1e-4f);
      expect_close(tag + " state", S2.host(), ref_S, 1e-4f, 1e-4f);
    }
  }
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
  // The chunked rule: the same shape rules, and a workspace smaller than its size for n_tok.
  a.dk = 128, a.dv = 128;
  const size_t wb = dn_rule_chunked_work_bytes(100, a.Hk, a.Hv, a.dk, a.dv);
  EXPECT_GT(wb, 0u);
  void* w = reinterpret_cast<void*>(256);
  EXPECT_EQ(launch_dn_rule_chunked(a, one, 100, w, wb - 4, nullptr), cudaErrorInvalidValue);  // work too small
  EXPECT_EQ(launch_dn_rule_chunked(a, one, 100, nullptr, wb, nullptr), cudaErrorInvalidValue);
  a.dk = 288;
  EXPECT_EQ(launch_dn_rule_chunked(a, one, 100, w, wb * 4, nullptr), cudaErrorInvalidValue);  // dk > 256
  a.dk = 128, a.dv = 48;
  EXPECT_EQ(launch_dn_rule_chunked(a, one, 100, w, wb * 4, nullptr), cudaErrorInvalidValue);
  a.dv = 128, a.l2_eps = 0.f;
  EXPECT_EQ(launch_dn_rule_chunked(a, one, 100, w, wb, nullptr), cudaErrorInvalidValue);
  a.l2_eps = 1e-6f;
  EXPECT_EQ(launch_dn_rule_chunked(a, dn_runs{nullptr, 1, 1}, 100, w, wb, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_dn_rule_chunked(a, dn_runs{nullptr, 0, 0}, 100, nullptr, 0, nullptr), cudaSuccess);
  EXPECT_EQ(launch_dn_conv(nullptr, 8, nullptr, 8, 9, nullptr, one, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_dn_conv(nullptr, 8, nullptr, 8, 0, nullptr, one, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_dn_conv(nullptr, 4, nullptr, 8, 4, nullptr, one, nullptr, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace tandem
