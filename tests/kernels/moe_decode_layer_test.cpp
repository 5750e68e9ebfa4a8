// The persistent MoE decode layer (kernels/moe_decode_layer.h) against a CPU reference on random
// weights: the selection, x += the routed and shared experts' sum, the next norm and its int8
// copy; its grid barriers alone; a second launch and a CUDA graph replay give the same bits; what
// it refuses. big.moe_decode_layer times it and the launch chain it replaces on the
// Qwen3.5-35B-A3B shape. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/layer_ops.h"
#include "kernels/matvec.h"
#include "kernels/moe.h"
#include "kernels/moe_decode_layer.h"
#include "kernels/moe_route.h"
#include "quant/quant.h"
#include "kernel_test_util.h"
#include "moe_test_util.h"

namespace tandem {
namespace {

using test::dev;
using test::experts;
using test::make_experts;
using test::randoms;

struct layer_case {
  ggml_type gu, down;
  int n_expert, k;
  int64_t E, F, Fs;
  bool renorm, next;
  std::string name() const {
    return std::string(type_name(gu)) + "/" + std::string(type_name(down)) + " experts " +
           std::to_string(n_expert) + " k " + std::to_string(k) + " E " + std::to_string(E) + " F " +
           std::to_string(F) + " Fs " + std::to_string(Fs) + (renorm ? " renorm" : "") + (next ? " next" : "");
  }
};

constexpr float k_eps = 1e-6f;

// One layer's weights and inputs on the host and the device, and the launch's arguments.
struct layer {
  layer_case c;
  experts gate, up, down, sgate, sup, sdown;
  std::vector<float> router, gate_row, x0, norm_w, next_w;
  dev<float> d_router, d_gate_row, d_x, d_x0, d_norm_w, d_xn, d_next_w, d_next_xn, d_w;
  dev<uint8_t> d_gate, d_up, d_down, d_sgate, d_sup, d_sdown, d_x_work, d_next_work, d_work;
  dev<int32_t> d_ids;
  moe_decode_layer_args a;

  explicit layer(const layer_case& lc)
      : c(lc),
        gate(make_experts(c.gu, c.n_expert, c.E, c.F, 100)),
        up(make_experts(c.gu, c.n_expert, c.E, c.F, 300)),
        down(make_experts(c.down, c.n_expert, c.F, c.E, 500)),
        sgate(make_experts(c.gu, 1, c.E, std::max<int64_t>(c.Fs, 256), 700)),
        sup(make_experts(c.gu, 1, c.E, std::max<int64_t>(c.Fs, 256), 800)),
        sdown(make_experts(c.down, 1, std::max<int64_t>(c.Fs, 256), c.E, 900)),
        router(randoms(size_t(c.n_expert * c.E), 11, -0.05f, 0.05f)),
        gate_row(randoms(size_t(c.E), 12, -0.05f, 0.05f)),
        x0(randoms(size_t(c.E), 13)),
        norm_w(randoms(size_t(c.E), 14, 0.5f, 1.5f)),
        next_w(randoms(size_t(c.E), 15, 0.5f, 1.5f)),
        d_router(router), d_gate_row(gate_row), d_x(x0), d_x0(x0), d_norm_w(norm_w), d_xn(size_t(c.E)),
        d_next_w(next_w), d_next_xn(size_t(c.E)), d_w(size_t(c.k)),
        d_gate(gate.q), d_up(up.q), d_down(down.q), d_sgate(sgate.q), d_sup(sup.q), d_sdown(sdown.q),
        d_x_work(matvec_work_bytes(c.E, 1)), d_next_work(matvec_work_bytes(c.E, 1)),
        d_work(moe_decode_layer_work_bytes(c.n_expert, c.k, c.F, c.Fs)), d_ids(size_t(c.k)) {
    a.x = d_x.p, a.norm_w = d_norm_w.p, a.eps = k_eps, a.n_embd = c.E;
    a.router = d_router.p, a.n_expert = c.n_expert, a.k = c.k, a.renorm = c.renorm;
    a.gate_up_type = c.gu, a.gate = d_gate.p, a.up = d_up.p, a.gate_up_stride = gate.stride;
    a.down_type = c.down, a.down = d_down.p, a.down_stride = down.stride, a.n_ff = c.F;
    if (c.Fs > 0) {
      a.shexp_gate = d_sgate.p, a.shexp_up = d_sup.p, a.shexp_down = d_sdown.p, a.shexp_gate_row = d_gate_row.p;
      a.n_ff_shexp = c.Fs;
    }
    if (c.next) a.next.w = d_next_w.p, a.next.eps = k_eps, a.next.xn = d_next_xn.p, a.next.work = d_next_work.p;
    a.ids = d_ids.p, a.weights = d_w.p, a.work = d_work.p;
  }

  // x back to x0, this layer's norm as launch_rms_norm_q8 makes it (for the reference: the launch
  // makes its own, the same bits from 1024 values on, last-bit differences below, far inside the
  // tolerances), then the launch.
  cudaError_t run(cudaStream_t s) {
    cudaError_t e = cudaMemcpyAsync(d_x.p, d_x0.p, x0.size() * sizeof(float), cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess) e = launch_rms_norm_q8(d_x.p, d_norm_w.p, d_xn.p, 1, int(c.E), k_eps, d_x_work.p, s);
    if (e == cudaSuccess) e = launch_moe_decode_layer(a, s);
    return e;
  }
};

double silu_mul(double g, double u) { return g / (1.0 + std::exp(-g)) * u; }

// Row o of matrix e of an expert stack (dequantized) dotted with v; mag: the sum of |terms|.
double row_dot(const experts& m, int e, int64_t n_out, int64_t n_in, int64_t o, const std::vector<double>& v,
               double* mag = nullptr) {
  const float* r = m.deq.data() + (size_t(e) * n_out + o) * n_in;
  double s = 0.0, g = 0.0;
  for (int64_t i = 0; i < n_in; ++i) s += double(r[i]) * v[i], g += std::fabs(double(r[i]) * v[i]);
  if (mag) *mag = g;
  return s;
}

// One expert's h = silu(gate xq) * up xq (x as the int8 copy gives it), in double.
std::vector<double> expert_h(const experts& g, const experts& u, int e, int64_t F, int64_t E,
                             const std::vector<double>& xq) {
  std::vector<double> h(static_cast<size_t>(F));
  for (int64_t r = 0; r < F; ++r) h[r] = silu_mul(row_dot(g, e, F, E, r, xq), row_dot(u, e, F, E, r, xq));
  return h;
}

// Checks one launch's outputs against the reference; the selection is the launch's own (checked
// against the logits first), so a near-tie the float32 logits break the other way cannot fail it.
void check_layer(layer& L) {
  const layer_case& c = L.c;
  const std::string what = c.name();
  const auto xn = L.d_xn.host(), x = L.d_x.host(), w = L.d_w.host();
  const auto ids = L.d_ids.host();
  const auto seen = test::as_seen(xn.data(), c.E, true);
  const std::vector<double> xq(seen.begin(), seen.end()), xf(xn.begin(), xn.end());

  // The selection: the k largest logits (float32 sums of up to 4096 products of |.| < 0.05 err
  // by ~1e-6), softmax weights over all experts, renormalised over the k when asked.
  std::vector<double> logit(size_t(c.n_expert));
  double mx = -1e300, z = 0.0;
  for (int e = 0; e < c.n_expert; ++e) {
    logit[e] = 0.0;
    for (int64_t i = 0; i < c.E; ++i) logit[e] += double(L.router[size_t(e) * c.E + i]) * xf[i];
    mx = std::max(mx, logit[e]);
  }
  for (int e = 0; e < c.n_expert; ++e) z += std::exp(logit[e] - mx);
  std::vector<bool> chosen(size_t(c.n_expert), false);
  double sel = 0.0, low = 1e300;
  for (int j = 0; j < c.k; ++j) {
    ASSERT_GE(ids[j], 0) << what;
    ASSERT_LT(ids[j], c.n_expert) << what;
    ASSERT_FALSE(chosen[ids[j]]) << what << ": expert " << ids[j] << " twice";
    chosen[ids[j]] = true;
    sel += std::exp(logit[ids[j]] - mx) / z;
    low = std::min(low, logit[ids[j]]);
  }
  for (int e = 0; e < c.n_expert; ++e) {
    if (chosen[e]) continue;
    ASSERT_LE(logit[e], low + 1e-5) << what << ": expert " << e << " beats a chosen one";
  }
  for (int j = 0; j < c.k; ++j) {
    const double p = std::exp(logit[ids[j]] - mx) / z, want = c.renorm ? p / sel : p;
    ASSERT_NEAR(w[j], want, 1e-5 * want + 1e-7) << what << " slot " << j;
  }

  // x += sum_j w_j down_j(h_j) + sigmoid(g) down_s(h_s), h as floats (no int8 rounding of h).
  std::vector<std::vector<double>> h;
  for (int j = 0; j < c.k; ++j) h.push_back(expert_h(L.gate, L.up, ids[j], c.F, c.E, xq));
  std::vector<double> hs;
  double gate = 0.0;
  if (c.Fs > 0) {
    hs = expert_h(L.sgate, L.sup, 0, c.Fs, c.E, xq);
    double gl = 0.0;
    for (int64_t i = 0; i < c.E; ++i) gl += double(L.gate_row[i]) * xf[i];
    gate = 1.0 / (1.0 + std::exp(-gl));
  }
  for (int64_t o = 0; o < c.E; ++o) {
    double s = L.x0[o], mag = std::fabs(L.x0[o]), m = 0.0;
    for (int j = 0; j < c.k; ++j) s += w[j] * row_dot(L.down, ids[j], c.E, c.F, o, h[j], &m), mag += w[j] * m;
    if (c.Fs > 0) s += gate * row_dot(L.sdown, 0, c.E, c.Fs, o, hs, &m), mag += gate * m;
    // float32 sums of a few thousand terms, through h's float32 products: far below 1e-4 of the
    // terms' magnitude; a wrong row, slot or piece is off by the magnitude itself.
    ASSERT_NEAR(x[o], s, 1e-4 * mag + 1e-5) << what << " row " << o;
  }
  if (!c.next) return;

  // The next norm from the launch's own x (as launch_rms_norm_q8 would make it), and its int8
  // copy exactly as the kernels quantize the floats written.
  double ss = 0.0;
  for (float v : x) ss += double(v) * v;
  const double inv = 1.0 / std::sqrt(ss / double(c.E) + k_eps);
  const auto xn2 = L.d_next_xn.host();
  for (int64_t i = 0; i < c.E; ++i) {
    const double want = x[i] * inv * L.next_w[i];
    ASSERT_NEAR(xn2[i], want, 1e-5 * std::fabs(want) + 1e-6) << what << " next xn " << i;
  }
  const matvec_qx q = matvec_x_parts(L.d_next_work.p, c.E, 1);
  std::vector<int8_t> qh(size_t(c.E));
  std::vector<float2> dh(size_t(c.E / 32));
  ASSERT_EQ(cudaMemcpy(qh.data(), q.q, qh.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dh.data(), q.ds, dh.size() * sizeof(float2), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int64_t b = 0; b < c.E / 32; ++b) {
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xn2[32 * b + i]));
    const float d = amax / 127.f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int qv = amax > 0.f ? int(std::nearbyint(xn2[32 * b + i] / d)) : 0;
      sum += qv;
      ASSERT_EQ(qh[32 * b + i], qv) << what << " next int8 " << 32 * b + i;
    }
    ASSERT_EQ(dh[b].x, d) << what << " block " << b;
    ASSERT_EQ(dh[b].y, d * float(sum)) << what << " block " << b;
  }
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// The grid barriers and the last-block ticket alone, in a launch shaped as the layer's: every
// round's exchange between neighbouring blocks, one last block, and the words left reusable.
TEST(moe_decode_layer, grid_barriers_exchange_and_one_block_is_last) {
  REQUIRE_GPU();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  dev<uint8_t> work(size_t(16));
  ASSERT_EQ(moe_decode_layer_reset(work.p, nullptr), cudaSuccess);
  for (int rounds : {0, 1, 2, 100})
    for (int launch = 0; launch < 2; ++launch) {
      dev<int> vals(size_t(4 * sms)), out(size_t(2 * sms + 1), 0);
      int grid = 0;
      ASSERT_EQ(moe_decode_layer_sync_check(vals.p, out.p, rounds, work.p, grid, nullptr), cudaSuccess);
      const auto o = out.host();
      ASSERT_GE(grid, 1);
      ASSERT_LE(grid, 2 * sms);
      for (int b = 0; b < grid; ++b) {
        int want = 0;
        for (int r = 0; r < rounds; ++r) want += r * grid + (b + 1) % grid;
        ASSERT_EQ(o[b], want) << "rounds " << rounds << " launch " << launch << " block " << b;
      }
      EXPECT_EQ(o[grid], 1) << "rounds " << rounds << ": blocks that took themselves for the last";
    }
}

TEST(moe_decode_layer, matches_the_reference) {
  REQUIRE_GPU();
  const layer_case cases[] = {
      // The 35B's types (Q4_K gate/up, Q6_K or Q4_K down) with a shared expert and the next norm.
      {ggml_type::q4_k, ggml_type::q6_k, 160, 8, 1024, 256, 512, false, true},
      {ggml_type::q4_k, ggml_type::q4_k, 64, 8, 1024, 512, 256, false, true},
      // qwen3moe's renormalised weights, no shared expert, no norm; other types and k.
      {ggml_type::q4_k, ggml_type::q4_k, 128, 8, 2048, 256, 0, true, false},
      {ggml_type::q6_k, ggml_type::q8_0, 40, 5, 1024, 256, 256, true, true},
      {ggml_type::q8_0, ggml_type::q5_k, 300, 10, 1024, 256, 0, false, false},
      {ggml_type::q5_k, ggml_type::q6_k, 16, 3, 512, 256, 256, false, false},
  };
  for (const auto& lc : cases) {
    layer L(lc);
    ASSERT_TRUE(moe_decode_layer_fits(L.a)) << lc.name();
    ASSERT_EQ(moe_decode_layer_reset(L.a.work, nullptr), cudaSuccess);
    ASSERT_EQ(L.run(nullptr), cudaSuccess) << lc.name();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << lc.name();
    check_layer(L);
    if (HasFatalFailure()) return;
  }
}

// The grid-sync words left by one launch serve the next, eagerly and from a graph, with the
// same bits each time.
TEST(moe_decode_layer, repeats_and_replays_from_a_graph_with_the_same_bits) {
  REQUIRE_GPU();
  layer L({ggml_type::q4_k, ggml_type::q6_k, 256, 8, 2048, 512, 512, false, true});
  ASSERT_EQ(moe_decode_layer_reset(L.a.work, nullptr), cudaSuccess);
  ASSERT_EQ(L.run(nullptr), cudaSuccess);
  const auto x1 = bits(L.d_x.host()), n1 = bits(L.d_next_xn.host());
  ASSERT_EQ(L.run(nullptr), cudaSuccess);
  EXPECT_EQ(bits(L.d_x.host()), x1);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t g;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const cudaError_t run = L.run(s);
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  ASSERT_EQ(run, cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec, g, 0), cudaSuccess);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(cudaMemsetAsync(L.d_next_xn.p, 0, L.d_next_xn.n * sizeof(float), s), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(bits(L.d_x.host()), x1) << "replay " << r;
    EXPECT_EQ(bits(L.d_next_xn.host()), n1) << "replay " << r;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

TEST(moe_decode_layer, refuses_what_it_does_not_fit) {
  REQUIRE_GPU();
  layer L({ggml_type::q4_k, ggml_type::q4_k, 32, 4, 1024, 256, 256, false, true});
  ASSERT_TRUE(moe_decode_layer_fits(L.a));
  const auto refused = [&](const char* why, auto change) {
    moe_decode_layer_args b = L.a;
    change(b);
    EXPECT_FALSE(moe_decode_layer_fits(b)) << why;
    EXPECT_EQ(launch_moe_decode_layer(b, nullptr), cudaErrorInvalidValue) << why;
  };
  refused("a type without a path", [](moe_decode_layer_args& b) { b.gate_up_type = ggml_type::q4_0; });
  refused("float experts", [](moe_decode_layer_args& b) { b.down_type = ggml_type::f32; });
  refused("n_embd not a multiple of 256", [](moe_decode_layer_args& b) { b.n_embd = 1000; });
  refused("a next norm below 1024", [](moe_decode_layer_args& b) { b.n_embd = 768; });
  refused("Q6_K rows past 64 pieces",
          [](moe_decode_layer_args& b) { b.n_embd = 4096, b.gate_up_type = ggml_type::q6_k; });
  refused("k above n_expert", [](moe_decode_layer_args& b) { b.n_expert = 3; });
  refused("k above k_moe_max_k", [](moe_decode_layer_args& b) { b.k = 17; });
  refused("a negative eps", [](moe_decode_layer_args& b) { b.eps = -1.f; });
  refused("h past shared memory", [](moe_decode_layer_args& b) { b.k = 16, b.n_ff = 1024; });
  refused("misaligned norm weights", [](moe_decode_layer_args& b) { b.norm_w += 1; });
  refused("no norm weights", [](moe_decode_layer_args& b) { b.norm_w = nullptr; });
  refused("no scratch", [](moe_decode_layer_args& b) { b.work = nullptr; });
  refused("a shared expert without its gate row", [](moe_decode_layer_args& b) { b.shexp_gate_row = nullptr; });
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Benchmark: µs a launch on the Qwen3.5-35B-A3B shape (2048 wide, 256 experts of 512 rows, top 8,
// a 512-row shared expert; Q4_K gate/up, Q6_K down), cycling over layer copies with their own
// router so each launch reads its experts from HBM. One expert's matrices repeated stand in for
// the 256 (quantizing them all would take minutes).
TEST(big, moe_decode_layer) {
  REQUIRE_GPU();
  const int64_t E = 2048, F = 512, n_exp = 256, k = 8;
  const int copies = 4;
  const auto one = [](ggml_type t, int64_t n_in, int64_t n_out, uint32_t seed) {
    return test::quantize_matrix(t, randoms(size_t(n_in * n_out), seed), n_in, n_out);
  };
  const auto g1 = one(ggml_type::q4_k, E, F, 1), u1 = one(ggml_type::q4_k, E, F, 2), d1 = one(ggml_type::q6_k, F, E, 3);
  const auto stack = [&](const std::vector<uint8_t>& m) {
    std::vector<uint8_t> all(m.size() * size_t(n_exp * copies));
    for (int64_t e = 0; e < n_exp * copies; ++e) std::copy(m.begin(), m.end(), all.begin() + e * int64_t(m.size()));
    return all;
  };
  dev<uint8_t> dg(stack(g1)), du(stack(u1)), dd(stack(d1)), sg(g1), su(u1), sd(d1);
  dev<float> router(randoms(size_t(copies * n_exp * E), 4, -0.05f, 0.05f)), row(randoms(size_t(E), 5, -0.05f, 0.05f));
  dev<float> x(randoms(size_t(E), 6)), nw(randoms(size_t(E), 7, 0.5f, 1.5f));
  dev<float> xn(static_cast<size_t>(E)), w(static_cast<size_t>(k));
  dev<int32_t> ids(static_cast<size_t>(k));
  dev<uint8_t> xw(matvec_work_bytes(E, 1)), work(moe_decode_layer_work_bytes(int(n_exp), int(k), F, F));
  ASSERT_EQ(moe_decode_layer_reset(work.p, nullptr), cudaSuccess);
  moe_decode_layer_args a;
  a.x = x.p, a.norm_w = nw.p, a.eps = k_eps, a.n_embd = E, a.n_expert = int(n_exp), a.k = int(k);
  a.gate_up_type = ggml_type::q4_k, a.down_type = ggml_type::q6_k, a.n_ff = F;
  a.gate_up_stride = g1.size(), a.down_stride = d1.size();
  a.shexp_gate = sg.p, a.shexp_up = su.p, a.shexp_down = sd.p, a.shexp_gate_row = row.p, a.n_ff_shexp = F;
  a.next.w = nw.p, a.next.eps = k_eps, a.next.xn = xn.p, a.next.work = xw.p;
  a.ids = ids.p, a.weights = w.p, a.work = work.p;
  cudaError_t failed = cudaSuccess;
  const auto launch = [&](int i, cudaStream_t s) {
    moe_decode_layer_args b = a;
    const int c = i % copies;
    b.router = router.p + size_t(c) * n_exp * E;
    b.gate = dg.p + size_t(c) * n_exp * g1.size(), b.up = du.p + size_t(c) * n_exp * u1.size();
    b.down = dd.p + size_t(c) * n_exp * d1.size();
    const cudaError_t e = launch_moe_decode_layer(b, s);
    if (e != cudaSuccess && failed == cudaSuccess) failed = e;
  };
  const double us = test::time_us(launch, true);
  ASSERT_EQ(failed, cudaSuccess) << cudaGetErrorString(failed);
  const double active = double(k + 1) * double(g1.size() + u1.size() + d1.size()) + double(n_exp + 1) * E * 4;
  std::printf("moe_decode_layer 35B shape: %.2f us a launch, %.1f MB active, %.0f GB/s\n", us, active / 1e6,
              active / us / 1e3);

  // The launch chain it replaces, as the backend runs it (cuda_moe_block.cpp): the norm, router,
  // routing, gate+up+SwiGLU, down and the combine with the next norm, the shared expert's four
  // launches on a second stream; the same layer copies.
  const auto sz = [](int64_t n) { return static_cast<size_t>(n); };
  dev<float> logits(sz(n_exp)), g(sz(k * F)), u(sz(k * F)), y(sz(k * E)), sgo(sz(F)), suo(sz(F)), ysh(sz(E)),
      gl(sz(1)), xn2(sz(E));
  dev<uint8_t> h_work(matvec_work_bytes(F, int(k))), sh_work(matvec_work_bytes(F, 1));
  cudaStream_t side;
  cudaEvent_t fork, join;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  const auto chain = [&](int i, cudaStream_t s) {
    const int c = i % copies;
    const auto* gate = dg.p + size_t(c) * n_exp * g1.size();
    const auto* up = du.p + size_t(c) * n_exp * u1.size();
    const auto* down = dd.p + size_t(c) * n_exp * d1.size();
    const float* rt = router.p + size_t(c) * n_exp * E;
    const auto step = [&](cudaError_t e) {
      if (e != cudaSuccess && failed == cudaSuccess) failed = e;
    };
    step(launch_rms_norm_q8(x.p, nw.p, xn.p, 1, int(E), k_eps, xw.p, s));
    step(cudaEventRecord(fork, s));
    step(cudaStreamWaitEvent(side, fork, 0));
    const matvec_job sgu[2] = {{ggml_type::q4_k, sg.p, F, sgo.p}, {ggml_type::q4_k, su.p, F, suo.p}};
    step(launch_matvec_jobs(E, sgu, 2, xn.p, true, 1, false, xw.p, side));
    step(launch_moe_swiglu_q8(sgo.p, suo.p, sgo.p, 1, int(F), sh_work.p, side));
    const matvec_job sdj[1] = {{ggml_type::q6_k, sd.p, E, ysh.p}};
    step(launch_matvec_jobs(F, sdj, 1, sgo.p, true, 1, false, sh_work.p, side));
    step(launch_matvec(ggml_type::f32, row.p, E, 1, xn.p, 1, gl.p, nullptr, side));
    step(cudaEventRecord(join, side));
    step(launch_matvec(ggml_type::f32, rt, E, n_exp, xn.p, 1, logits.p, nullptr, s));
    step(launch_moe_route(logits.p, 1, int(n_exp), int(k), false, ids.p, w.p, s));
    const moe_matvec_output gu[2] = {{gate, g.p}, {up, u.p}};
    step(launch_moe_matvec_swiglu(ggml_type::q4_k, gu, g1.size(), int(n_exp), E, F, xw.p, 1, int(k), ids.p,
                                  h_work.p, s));
    const moe_matvec_output dn[1] = {{down, y.p}};
    step(launch_moe_matvec_multi(ggml_type::q6_k, dn, 1, d1.size(), int(n_exp), F, E, g.p, F, true, 1, int(k), ids.p,
                                 h_work.p, s));
    step(cudaStreamWaitEvent(s, join, 0));
    moe_shared_term sh;
    sh.y = ysh.p, sh.gate_logits = gl.p;
    moe_next_norm nn;
    nn.w = nw.p, nn.eps = k_eps, nn.xn = xn2.p, nn.work = xw.p;
    step(launch_moe_combine_norm(y.p, w.p, 1, int(k), E, x.p, true, s, &sh, nn));
  };
  const double chain_us = test::time_us(chain, true);
  ASSERT_EQ(failed, cudaSuccess) << cudaGetErrorString(failed);
  std::printf("moe_decode_layer 35B shape: the launch chain %.2f us (%.2fx the persistent layer's time)\n", chain_us,
              chain_us / us);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaStreamDestroy(side);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace tandem
