// The mixture-of-experts kernels (kernels/moe.h) against CPU references on random inputs (the
// decode mat-vec: moe_matvec_test.cpp; routing: moe_route_test.cpp): combine (and with the next
// norm folded in), grouping (exact), the grouped GEMM (partial tiles, idle experts, one expert
// with every row) and its fused SwiGLU (bitwise against the GEMM then launch_swiglu). Benchmarks
// (big.*) print prefill TFLOPS. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/layer_ops.h"
#include "kernels/matvec.h"
#include "kernels/moe.h"
#include "kernels/moe_route.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "kernel_test_util.h"
#include "moe_test_util.h"

namespace tandem {
namespace {

using test::dev;
using test::experts;
using test::make_experts;
using test::quantize_matrix;
using test::random_ids;
using test::randoms;
using test::time_us;

// The routed sum, then (shared 1: gate logits given, 2: the float32 gate row dotted with x in
// the launch) the shared expert's sigmoid-gated rows.
TEST(moe, combine_weighted_sum_residual_and_shared_expert) {
  REQUIRE_GPU();
  for (int shared : {0, 1, 2})
  for (int k : {1, 3, 8, 16})
  for (int64_t n : {1000, 1001}) {  // float4 rows, and the scalar kernel
    const int n_tok = 5;
    const auto y = randoms(size_t(n_tok * k * n), 21), w = randoms(size_t(n_tok * k), 22, 0.f, 1.f),
               r = randoms(size_t(n_tok * n), 23), ys = randoms(size_t(n_tok * n), 24),
               gl = randoms(size_t(n_tok), 25, -4.f, 4.f), row = randoms(size_t(n), 26, -0.1f, 0.1f),
               xs = randoms(size_t(n_tok * n), 27);
    std::vector<double> logit(n_tok);
    for (int t = 0; t < n_tok; ++t) {
      logit[t] = gl[t];
      if (shared == 2) {
        logit[t] = 0.0;
        for (int64_t i = 0; i < n; ++i) logit[t] += double(row[i]) * xs[t * n + i];
      }
    }
    for (bool add : {false, true}) {
      dev<float> dy(y), dw(w), out(r), dys(ys), dgl(gl), drow(row), dxs(xs);
      moe_shared_term sh;
      sh.y = dys.p;
      if (shared == 1) sh.gate_logits = dgl.p;
      if (shared == 2) sh.gate_row = drow.p, sh.x = dxs.p;
      ASSERT_EQ(launch_moe_combine(dy.p, dw.p, n_tok, k, n, out.p, add, nullptr, shared ? &sh : nullptr), cudaSuccess);
      const auto o = out.host();
      for (int t = 0; t < n_tok; ++t) {
        const double gate = 1.0 / (1.0 + std::exp(-logit[t]));
        for (int64_t i = 0; i < n; ++i) {
          double s = add ? r[t * n + i] : 0.0, mag = std::fabs(s);
          for (int j = 0; j < k; ++j) s += double(w[t * k + j]) * y[(t * k + j) * n + i], mag += std::fabs(w[t * k + j] * y[(t * k + j) * n + i]);
          if (shared) s += gate * ys[t * n + i], mag += std::fabs(gate * ys[t * n + i]);
          // k + 2 roundings; the gate row's float32 dot product (1000 terms of |.| < 0.1) errs by
          // well under 1e-5 of a logit, times sigmoid' <= 1/4.
          const double tol = 1e-6 * mag + 1e-7 + (shared == 2 ? 3e-6 * std::fabs(ys[t * n + i]) : 0.0);
          ASSERT_NEAR(o[t * n + i], s, tol) << "shared " << shared << " k " << k << " n " << n << " t " << t << " i " << i;
        }
      }
    }
  }
}

// The combine with the next layer's input norm folded in against the combine followed by
// launch_rms_norm_q8 (what the layer would launch): the same bits in x, xn and xn's int8 copy,
// for every shared-term form, k of 8 and more, 1..8 tokens and rows of 1024..8192.
TEST(moe, combine_norm_is_combine_then_norm_bits) {
  REQUIRE_GPU();
  for (int shared : {0, 1, 2})
  for (int k : {8, 10})
  for (int64_t n : {1024, 2048, 3072, 8192})
  for (int n_tok : {1, 3, 8}) {
    const auto y = randoms(size_t(n_tok * k * n), 31), w = randoms(size_t(n_tok * k), 32, 0.f, 1.f),
               r = randoms(size_t(n_tok * n), 33), ys = randoms(size_t(n_tok * n), 34),
               gl = randoms(size_t(n_tok), 35, -4.f, 4.f), row = randoms(size_t(n), 36, -0.1f, 0.1f),
               xs = randoms(size_t(n_tok * n), 37), nw = randoms(size_t(n), 38, 0.5f, 1.5f);
    dev<float> dy(y), dw(w), dys(ys), dgl(gl), drow(row), dnw(nw);
    dev<float> x1(r), x2(r), xs1(xs), xs2(xs), xn1(size_t(n_tok * n)), xn2(size_t(n_tok * n));
    dev<uint8_t> work1(matvec_work_bytes(n, n_tok)), work2(matvec_work_bytes(n, n_tok));
    // The gate's x is the layer's normed input, which the folded norm then overwrites (xn).
    moe_shared_term s1, s2;
    s1.y = s2.y = dys.p;
    if (shared == 1) s1.gate_logits = s2.gate_logits = dgl.p;
    if (shared == 2) s1.gate_row = s2.gate_row = drow.p, s1.x = xs1.p, s2.x = xs2.p;
    ASSERT_EQ(launch_moe_combine(dy.p, dw.p, n_tok, k, n, x1.p, true, nullptr, shared ? &s1 : nullptr), cudaSuccess);
    ASSERT_EQ(launch_rms_norm_q8(x1.p, dnw.p, xn1.p, n_tok, int(n), 1e-6f, work1.p, nullptr), cudaSuccess);
    moe_next_norm nn;
    nn.w = dnw.p, nn.eps = 1e-6f, nn.xn = shared == 2 ? xs2.p : xn2.p, nn.work = work2.p;
    ASSERT_TRUE(moe_combine_norm_fits(n_tok, n));
    ASSERT_EQ(launch_moe_combine_norm(dy.p, dw.p, n_tok, k, n, x2.p, true, nullptr, shared ? &s2 : nullptr, nn),
              cudaSuccess);
    const std::string what = "shared " + std::to_string(shared) + " k " + std::to_string(k) + " n " +
                             std::to_string(n) + " tokens " + std::to_string(n_tok);
    const auto bits = [](const std::vector<float>& v) {
      std::vector<uint32_t> b(v.size());
      std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
      return b;
    };
    ASSERT_EQ(bits(x1.host()), bits(x2.host())) << what << ": x";
    ASSERT_EQ(bits(xn1.host()), bits(shared == 2 ? xs2.host() : xn2.host())) << what << ": xn";
    const matvec_qx q1 = matvec_x_parts(work1.p, n, n_tok), q2 = matvec_x_parts(work2.p, n, n_tok);
    const size_t qbytes = size_t(reinterpret_cast<uint8_t*>(q1.ds) - work1.p) + size_t(n / 32 * n_tok) * sizeof(float2);
    std::vector<uint8_t> h1(qbytes), h2(qbytes);
    ASSERT_EQ(cudaMemcpy(h1.data(), work1.p, qbytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(h2.data(), work2.p, qbytes, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(reinterpret_cast<uint8_t*>(q2.ds) - work2.p, reinterpret_cast<uint8_t*>(q1.ds) - work1.p);
    ASSERT_EQ(h1, h2) << what << ": int8 copy";
  }
}

TEST(moe, combine_norm_rejects_what_it_does_not_fit) {
  REQUIRE_GPU();
  dev<float> y(size_t(8 * 2048)), w(size_t(8)), out(size_t(2048)), nw(size_t(2048)), xn(size_t(2048));
  dev<uint8_t> work(matvec_work_bytes(2048, 1));
  moe_next_norm nn;
  nn.w = nw.p, nn.eps = 1e-6f, nn.xn = xn.p, nn.work = work.p;
  EXPECT_FALSE(moe_combine_norm_fits(1, 1000));   // not a multiple of 32
  EXPECT_FALSE(moe_combine_norm_fits(1, 512));    // below the wide norm's rows
  EXPECT_FALSE(moe_combine_norm_fits(9, 2048));   // more tokens than a decode step
  EXPECT_FALSE(moe_combine_norm_fits(1, 8224));   // past the registers' 8192
  EXPECT_EQ(launch_moe_combine_norm(y.p, w.p, 1, 8, 1000, out.p, true, nullptr, nullptr, nn), cudaErrorInvalidValue);
  nn.work = nullptr;
  EXPECT_EQ(launch_moe_combine_norm(y.p, w.p, 1, 8, 2048, out.p, true, nullptr, nullptr, nn), cudaErrorInvalidValue);
  nn.work = work.p;
  EXPECT_EQ(launch_moe_combine_norm(y.p, w.p, 1, 8, 2048, out.p + 1, true, nullptr, nullptr, nn),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_moe_combine_norm(y.p, w.p, 1, 8, 2048, out.p, true, nullptr, nullptr, nn), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(moe, combine_rejects_incomplete_shared_term) {
  REQUIRE_GPU();
  dev<float> y(size_t(64)), w(size_t(8)), out(size_t(64));
  moe_shared_term sh;  // no y
  EXPECT_EQ(launch_moe_combine(y.p, w.p, 1, 1, 64, out.p, true, nullptr, &sh), cudaErrorInvalidValue);
  sh.y = y.p;  // no gate: neither logits nor row and x
  EXPECT_EQ(launch_moe_combine(y.p, w.p, 1, 1, 64, out.p, true, nullptr, &sh), cudaErrorInvalidValue);
  sh.gate_row = w.p;  // a row without x
  EXPECT_EQ(launch_moe_combine(y.p, w.p, 1, 1, 64, out.p, true, nullptr, &sh), cudaErrorInvalidValue);
}

// ---- Grouping -----------------------------------------------------------------------------

struct grouping {
  std::vector<int32_t> counts, offsets, perm, tiles;
};

grouping group_cpu(const std::vector<int32_t>& ids, int n_expert) {
  grouping g;
  g.counts.assign(n_expert + 1, 0);
  const auto bucket = [&](int32_t id) { return id >= 0 && id < n_expert ? id : n_expert; };
  for (int32_t id : ids) ++g.counts[bucket(id)];
  g.offsets.assign(n_expert + 1, 0);
  g.tiles.assign(n_expert + 1, 0);
  for (int e = 1; e <= n_expert; ++e) {
    g.offsets[e] = g.offsets[e - 1] + g.counts[e - 1];
    g.tiles[e] = g.tiles[e - 1] + (g.counts[e - 1] + k_moe_gemm_rows - 1) / k_moe_gemm_rows;
  }
  g.perm.assign(ids.size(), -1);
  std::vector<int32_t> next(g.offsets);
  next.push_back(0);
  for (size_t p = 0; p < ids.size(); ++p) g.perm[next[bucket(ids[p])]++] = int32_t(p);
  return g;
}

grouping group_gpu(const std::vector<int32_t>& ids, int n_tok, int k, int n_expert) {
  dev<int32_t> di(ids), counts(size_t(n_expert + 1)), offsets(size_t(n_expert + 1)), perm(ids.size()),
      tiles(size_t(n_expert + 1));
  dev<uint8_t> work(moe_group_work_bytes(n_tok, k, n_expert));
  EXPECT_EQ(launch_moe_group(di.p, n_tok, k, n_expert, counts.p, offsets.p, perm.p, tiles.p, work.p, nullptr),
            cudaSuccess);
  return {counts.host(), offsets.host(), perm.host(), tiles.host()};
}

TEST(moe, group_is_a_stable_counting_sort) {
  REQUIRE_GPU();
  struct gcase {
    int n_tok, k, n_expert;
  };
  const std::vector<gcase> cases = {{1, 1, 1},      {0, 8, 128},    {7, 2, 4},  {300, 8, 128},
                                    {2048, 8, 128}, {999, 10, 512}, {1000, 1, 3}};
  for (const gcase& c : cases) {
    auto ids = c.n_tok > 0 ? random_ids(c.n_tok, c.k, c.n_expert, 11 + c.n_tok) : std::vector<int32_t>{};
    if (ids.size() > 10) ids[3] = -1, ids[ids.size() - 2] = c.n_expert;  // invalid ids go last
    const grouping want = group_cpu(ids, c.n_expert), got = group_gpu(ids, c.n_tok, c.k, c.n_expert);
    const std::string what = "tok " + std::to_string(c.n_tok) + " k " + std::to_string(c.k) + " E " +
                             std::to_string(c.n_expert);
    EXPECT_EQ(got.counts, want.counts) << what;
    EXPECT_EQ(got.offsets, want.offsets) << what;
    EXPECT_EQ(got.tiles, want.tiles) << what;
    EXPECT_EQ(got.perm, want.perm) << what;
  }
}

// ---- Grouped GEMM -------------------------------------------------------------------------

using test::f16_round;

struct gemm_case {
  ggml_type type;
  int n_tok, k, n_expert;
  int64_t n_in, n_out;
  moe_rows x_rows, y_rows;
  int ids_kind;  // 0 random, 1 every pair on expert 2, 2 experts 1 and 3 idle
  int n_outs;
};

std::vector<int32_t> gemm_ids(const gemm_case& c) {
  if (c.ids_kind == 1) return std::vector<int32_t>(size_t(c.n_tok) * c.k, 2);
  auto ids = random_ids(c.n_tok, c.k, c.n_expert, 31);
  if (c.ids_kind == 2)
    for (auto& id : ids)
      if (id == 1 || id == 3) id = 0;
  return ids;
}

std::string describe(const gemm_case& c) {
  return std::string(type_name(c.type)) + " tok " + std::to_string(c.n_tok) + " k " + std::to_string(c.k) + " E " +
         std::to_string(c.n_expert) + " " + std::to_string(c.n_out) + "x" + std::to_string(c.n_in) + " rows " +
         std::to_string(int(c.x_rows)) + "/" + std::to_string(int(c.y_rows)) + " ids " + std::to_string(c.ids_kind);
}

void check_gemm(const gemm_case& c) {
  SCOPED_TRACE(describe(c));
  const auto ids = gemm_ids(c);
  const int64_t n_pairs = int64_t(c.n_tok) * c.k;
  const int64_t x_rows = c.x_rows == moe_rows::by_token ? c.n_tok : n_pairs;
  const auto x = randoms(size_t(x_rows * c.n_in), 41, -2.f, 2.f);
  experts ex[2] = {make_experts(c.type, c.n_expert, c.n_in, c.n_out, 60),
                   make_experts(c.type, c.n_expert, c.n_in, c.n_out, 460)};
  const grouping g = group_cpu(ids, c.n_expert);
  dev<int32_t> offsets(g.offsets), perm(g.perm), tiles(g.tiles);
  dev<uint8_t> w0(ex[0].q), w1(ex[1].q), work(moe_gemm_work_bytes(c.n_in, x_rows));
  dev<float> dx(x), y0(size_t(n_pairs * c.n_out)), y1(size_t(n_pairs * c.n_out));
  const moe_matvec_output outs[2] = {{w0.p, y0.p}, {w1.p, y1.p}};
  ASSERT_EQ(launch_moe_gemm(c.type, outs, c.n_outs, ex[0].stride, c.n_expert, c.n_in, c.n_out, dx.p, c.x_rows,
                            c.y_rows, c.n_tok, c.k, offsets.p, perm.p, tiles.p, work.p, nullptr),
            cudaSuccess);
  const std::vector<float> got[2] = {y0.host(), y1.host()};
  std::vector<float> xh(size_t(c.n_in)), wh(size_t(c.n_in));
  for (int m = 0; m < c.n_outs; ++m)
    for (int64_t r = 0; r < n_pairs; ++r) {
      const int pair = g.perm[r], e = ids[pair];
      const int64_t xr = c.x_rows == moe_rows::by_token ? pair / c.k : c.x_rows == moe_rows::by_pair ? pair : r;
      const int64_t yr = c.y_rows == moe_rows::by_pair ? pair : r;
      for (int64_t i = 0; i < c.n_in; ++i) xh[i] = f16_round(x[xr * c.n_in + i]);
      for (int64_t o = 0; o < c.n_out; ++o) {
        const float* wr = ex[m].gemm.data() + (size_t(e) * c.n_out + o) * c.n_in;
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < c.n_in; ++i) {
          const double wv = wr[i];
          ref += wv * xh[i], mag += std::fabs(wv * xh[i]);
        }
        // Both operands rounded to fp16 as the kernel does (test::gemm_weights); fp16 x fp16
        // products are exact in fp32, so only the tensor cores' fp32 accumulation differs: at
        // most ~n_in / 16 roundings of 2^-22 (truncating adders) of sum |w x|, 1.2e-5 at
        // n_in = 768; 2e-5 covers the shapes here.
        ASSERT_NEAR(got[m][yr * c.n_out + o], ref, 2e-5 * mag + 1e-5) << "mat " << m << " row " << r << " out " << o;
      }
    }
}

TEST(moe, grouped_gemm_matches_cpu) {
  REQUIRE_GPU();
  using mr = moe_rows;
  const gemm_case cases[] = {
      {ggml_type::f16, 1, 1, 4, 256, 64, mr::by_token, mr::grouped, 0, 1},
      {ggml_type::q4_k, 37, 4, 8, 512, 200, mr::by_token, mr::grouped, 0, 2},    // partial row and column tiles
      {ggml_type::q4_k, 150, 1, 4, 256, 128, mr::by_token, mr::by_pair, 1, 1},   // one expert, 3 tiles
      {ggml_type::q6_k, 90, 4, 6, 768, 130, mr::grouped, mr::by_pair, 2, 1},     // idle experts
      {ggml_type::q8_0, 70, 8, 16, 288, 96, mr::by_pair, mr::by_pair, 0, 1},
      {ggml_type::q4_0, 33, 2, 4, 256, 64, mr::by_token, mr::grouped, 2, 2},
      {ggml_type::q5_k, 20, 3, 5, 256, 48, mr::by_token, mr::by_pair, 0, 1},
      {ggml_type::f32, 64, 2, 3, 128, 160, mr::by_token, mr::grouped, 0, 1},
      {ggml_type::q4_1, 17, 2, 4, 64, 40, mr::by_pair, mr::grouped, 0, 1},
      {ggml_type::q5_0, 17, 2, 4, 64, 40, mr::by_token, mr::grouped, 0, 1},
      {ggml_type::q5_1, 17, 2, 4, 64, 40, mr::by_token, mr::grouped, 0, 1},
      // n_in a multiple of 128 with the generic decoders of the pipelined (qgemm) blocks
      {ggml_type::q8_0, 70, 8, 16, 384, 96, mr::by_pair, mr::by_pair, 0, 1},
      {ggml_type::q5_0, 40, 2, 4, 256, 72, mr::by_token, mr::grouped, 2, 2},
      {ggml_type::q6_k, 200, 8, 4, 256, 64, mr::by_token, mr::grouped, 1, 2},  // 25 tiles on one expert
  };
  for (const auto& c : cases) check_gemm(c);
}

// An environment variable set to v (nullptr: unset) while in scope: the fragment path's launchers
// read TANDEM_QGEMM_GROUPED_ITEMS (the column tiles a short-K grouped block takes; "0": the
// one-tile blocks) and TANDEM_QGEMM_WGMMA ("0": mma.sync on sm_90) at every launch.
class scoped_env {
 public:
  scoped_env(const char* name, const char* v) : name_(name) {
    const char* old = std::getenv(name_);
    had_ = old != nullptr;
    if (had_) saved_ = old;
    if (v) setenv(name_, v, 1);
    else unsetenv(name_);
  }
  ~scoped_env() {
    if (had_) setenv(name_, saved_.c_str(), 1);
    else unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string saved_;
};

// Every set's outputs of case c (poisoned where the GEMM writes nothing) with the items setting.
std::vector<float> gemm_outputs(const gemm_case& c, const experts (&ex)[2], const char* items) {
  const auto ids = gemm_ids(c);
  const int64_t n_pairs = int64_t(c.n_tok) * c.k, x_rows = c.x_rows == moe_rows::by_token ? c.n_tok : n_pairs;
  const grouping g = group_cpu(ids, c.n_expert);
  dev<int32_t> offsets(g.offsets), perm(g.perm), tiles(g.tiles);
  dev<uint8_t> w0(ex[0].q), w1(ex[1].q), work(moe_gemm_work_bytes(c.n_in, x_rows));
  dev<float> dx(randoms(size_t(x_rows * c.n_in), 41, -2.f, 2.f)), y0(size_t(n_pairs * c.n_out)),
      y1(size_t(n_pairs * c.n_out));
  const moe_matvec_output outs[2] = {{w0.p, y0.p}, {w1.p, y1.p}};
  const scoped_env env("TANDEM_QGEMM_GROUPED_ITEMS", items);
  EXPECT_EQ(launch_moe_gemm(c.type, outs, c.n_outs, ex[0].stride, c.n_expert, c.n_in, c.n_out, dx.p, c.x_rows,
                            c.y_rows, c.n_tok, c.k, offsets.p, perm.p, tiles.p, work.p, nullptr),
            cudaSuccess);
  auto y = y0.host();
  const auto second = y1.host();
  y.insert(y.end(), second.begin(), second.end());
  return y;
}

// The short-K blocks that take several column tiles of a row tile (Q4_K and Q6_K at n_in <= 1024
// on sm_80+, where their shared memory fits) against the one-tile blocks: the same products in
// the same order, so the same bits, at any tiles a block (partial column and row tiles, idle
// experts, one expert with every row, two sets, 1-4 K blocks, a last block with fewer tiles).
void check_items_are_one_tile_bits() {
  using mr = moe_rows;
  const gemm_case cases[] = {
      {ggml_type::q4_k, 37, 4, 8, 512, 200, mr::by_token, mr::grouped, 0, 2},
      {ggml_type::q6_k, 90, 4, 6, 768, 130, mr::grouped, mr::by_pair, 2, 1},
      {ggml_type::q6_k, 200, 8, 4, 256, 64, mr::by_token, mr::grouped, 1, 2},
      {ggml_type::q4_k, 70, 3, 8, 1024, 650, mr::by_token, mr::by_pair, 0, 1},
      {ggml_type::q6_k, 70, 3, 8, 1024, 650, mr::by_pair, mr::grouped, 2, 2},
      {ggml_type::q6_k, 300, 2, 4, 512, 1100, mr::by_token, mr::by_pair, 0, 1},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(describe(c));
    const experts ex[2] = {make_experts(c.type, c.n_expert, c.n_in, c.n_out, 60),
                           make_experts(c.type, c.n_expert, c.n_in, c.n_out, 460)};
    const auto want = gemm_outputs(c, ex, "0");
    for (const char* items : {static_cast<const char*>(nullptr), "1", "3", "64"}) {
      SCOPED_TRACE(items ? items : "default");
      const auto got = gemm_outputs(c, ex, items);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &want[i], 4), std::memcpy(&b, &got[i], 4);
        ASSERT_EQ(b, a) << "output " << i << ": " << got[i] << " vs " << want[i];
      }
    }
  }
}

TEST(moe, grouped_gemm_items_are_one_tile_bits) {
  REQUIRE_GPU();
  check_items_are_one_tile_bits();
}

TEST(moe, prefill_pipeline_with_device_grouping) {
  REQUIRE_GPU();
  // route -> group on the device -> grouped GEMM, against the same GEMM on the CPU grouping.
  const int n_tok = 129, n_expert = 32, k = 4;
  const int64_t n_in = 256, n_out = 96;
  const auto logits = randoms(size_t(n_tok * n_expert), 91);
  dev<float> dl(logits), dw(size_t(n_tok * k));
  dev<int32_t> ids(size_t(n_tok * k)), counts(size_t(n_expert + 1)), offsets(size_t(n_expert + 1)),
      perm(size_t(n_tok * k)), tiles(size_t(n_expert + 1));
  dev<uint8_t> gwork(moe_group_work_bytes(n_tok, k, n_expert));
  ASSERT_EQ(launch_moe_route(dl.p, n_tok, n_expert, k, true, ids.p, dw.p, nullptr), cudaSuccess);
  ASSERT_EQ(launch_moe_group(ids.p, n_tok, k, n_expert, counts.p, offsets.p, perm.p, tiles.p, gwork.p, nullptr),
            cudaSuccess);
  const auto hid = ids.host();
  const grouping want = group_cpu(hid, n_expert);
  EXPECT_EQ(perm.host(), want.perm);
  const auto ex = make_experts(ggml_type::q4_k, n_expert, n_in, n_out, 5);
  const auto x = randoms(size_t(n_tok * n_in), 92);
  dev<uint8_t> w(ex.q), work(moe_gemm_work_bytes(n_in, n_tok));
  dev<float> dx(x), y(size_t(n_tok * k * n_out));
  const moe_matvec_output o{w.p, y.p};
  ASSERT_EQ(launch_moe_gemm(ggml_type::q4_k, &o, 1, ex.stride, n_expert, n_in, n_out, dx.p, moe_rows::by_token,
                            moe_rows::by_pair, n_tok, k, offsets.p, perm.p, tiles.p, work.p, nullptr),
            cudaSuccess);
  const auto got = y.host();
  for (int p = 0; p < n_tok * k; ++p)
    for (int64_t oo = 0; oo < n_out; ++oo) {
      const float* wr = ex.gemm.data() + (size_t(hid[p]) * n_out + oo) * n_in;
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < n_in; ++i) {
        const double v = double(wr[i]) * f16_round(x[(p / k) * n_in + i]);
        ref += v, mag += std::fabs(v);
      }
      // Tolerance as in grouped_gemm_matches_cpu.
      ASSERT_NEAR(got[p * n_out + oo], ref, 2e-5 * mag + 1e-5) << "pair " << p << " out " << oo;
    }
}

// The fused gate/up SwiGLU against launch_moe_gemm of both then launch_swiglu: the same products
// and the same float expression, so the same bits (every row is in a group: no invalid ids).
void check_gemm_swiglu(const gemm_case& c) {
  SCOPED_TRACE(describe(c));
  const auto ids = gemm_ids(c);
  const int64_t n_pairs = int64_t(c.n_tok) * c.k, n = n_pairs * c.n_out;
  const int64_t x_rows = c.x_rows == moe_rows::by_token ? c.n_tok : n_pairs;
  // Wide enough that silu meets large negative, near-zero and large positive gates.
  const auto x = randoms(size_t(x_rows * c.n_in), 43, -3.f, 3.f);
  const experts gate = make_experts(c.type, c.n_expert, c.n_in, c.n_out, 70),
                up = make_experts(c.type, c.n_expert, c.n_in, c.n_out, 570);
  const grouping g = group_cpu(ids, c.n_expert);
  dev<int32_t> offsets(g.offsets), perm(g.perm), tiles(g.tiles);
  dev<uint8_t> wg(gate.q), wu(up.q), work(moe_gemm_work_bytes(c.n_in, x_rows));
  const size_t sz = static_cast<size_t>(n);
  dev<float> dx(x), yg(sz), yu(sz), h(std::vector<float>(sz, -7.f)), scratch(sz);
  const moe_matvec_output sep[2] = {{wg.p, yg.p}, {wu.p, yu.p}}, fused[2] = {{wg.p, h.p}, {wu.p, scratch.p}};
  ASSERT_EQ(launch_moe_gemm(c.type, sep, 2, gate.stride, c.n_expert, c.n_in, c.n_out, dx.p, c.x_rows, c.y_rows,
                            c.n_tok, c.k, offsets.p, perm.p, tiles.p, work.p, nullptr),
            cudaSuccess);
  ASSERT_EQ(launch_swiglu(yg.p, yu.p, yg.p, n, nullptr), cudaSuccess);
  ASSERT_EQ(launch_moe_gemm_swiglu(c.type, fused, gate.stride, c.n_expert, c.n_in, c.n_out, dx.p, c.x_rows, c.y_rows,
                                   c.n_tok, c.k, offsets.p, perm.p, tiles.p, work.p, nullptr),
            cudaSuccess);
  const auto want = yg.host(), got = h.host();
  for (int64_t i = 0; i < n; ++i) {
    uint32_t a, b;
    std::memcpy(&a, &want[i], 4), std::memcpy(&b, &got[i], 4);
    ASSERT_EQ(b, a) << "row " << i / c.n_out << " out " << i % c.n_out << ": " << got[i] << " vs " << want[i];
  }
  // fp16 operands (moe_gemm_f16): x given as fp16 (x and work not read), h written as fp16 into
  // up's scratch: launch_to_f16's bits of the h above; and the plain GEMM from the given x16 has
  // the bits of the one that converts x itself.
  dev<uint16_t> x16(size_t(x_rows * c.n_in)), want16(sz);
  ASSERT_EQ(launch_to_f16(dx.p, x16.p, x_rows * c.n_in, nullptr), cudaSuccess);
  ASSERT_EQ(launch_to_f16(yg.p, want16.p, n, nullptr), cudaSuccess);
  const moe_gemm_f16 f16{x16.p, reinterpret_cast<uint16_t*>(scratch.p)};
  ASSERT_EQ(launch_moe_gemm_swiglu(c.type, fused, gate.stride, c.n_expert, c.n_in, c.n_out, nullptr, c.x_rows,
                                   c.y_rows, c.n_tok, c.k, offsets.p, perm.p, tiles.p, nullptr, nullptr, f16),
            cudaSuccess);
  std::vector<uint16_t> got16(sz);
  ASSERT_EQ(cudaMemcpy(got16.data(), scratch.p, sz * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  const auto w16 = want16.host();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got16[i], w16[i]) << "fp16 h, row " << i / c.n_out << " out " << i % c.n_out;
  const moe_matvec_output up_only[1] = {{wu.p, yg.p}};
  ASSERT_EQ(launch_moe_gemm(c.type, up_only, 1, up.stride, c.n_expert, c.n_in, c.n_out, nullptr, c.x_rows, c.y_rows,
                            c.n_tok, c.k, offsets.p, perm.p, tiles.p, nullptr, nullptr, {x16.p, nullptr}),
            cudaSuccess);
  const auto want_u = yu.host(), got_u = yg.host();
  ASSERT_EQ(std::memcmp(want_u.data(), got_u.data(), sz * sizeof(float)), 0) << "up from the given fp16 x";
}

TEST(moe, grouped_gemm_swiglu_is_gemm_then_swiglu) {
  REQUIRE_GPU();
  using mr = moe_rows;
  // Q4_K and Q6_K: the fragment blocks' fused epilogue on sm_80+ (partial column tiles of 64
  // rows, idle experts, partial last row tiles, 25 row tiles of one expert); Q8_0 and Q5_K: the
  // WMMA qgemm blocks then launch_swiglu; F16: kernels/moe_gemm.cu's kernel then launch_swiglu.
  const gemm_case cases[] = {
      {ggml_type::q4_k, 150, 4, 8, 512, 200, mr::by_token, mr::grouped, 2, 2},
      {ggml_type::q4_k, 37, 8, 16, 2048, 64, mr::by_token, mr::by_pair, 0, 2},
      {ggml_type::q6_k, 90, 4, 6, 768, 130, mr::grouped, mr::by_pair, 2, 2},
      {ggml_type::q6_k, 200, 8, 4, 256, 72, mr::by_token, mr::grouped, 1, 2},
      {ggml_type::q8_0, 70, 8, 16, 384, 96, mr::by_token, mr::grouped, 2, 2},
      {ggml_type::q5_k, 20, 3, 5, 256, 48, mr::by_pair, mr::grouped, 0, 2},
      {ggml_type::f16, 33, 2, 4, 256, 72, mr::by_token, mr::grouped, 2, 2},
  };
  for (const auto& c : cases) check_gemm_swiglu(c);
}

// On sm_90 the fragment path's grouped GEMMs multiply by wgmma (kernels/qgemm_frag_wg.cuh), which
// the tests above check; its mma.sync form (sm_80, and sm_90 with TANDEM_QGEMM_WGMMA=0) against
// the same CPU sums and bit identities.
TEST(moe, grouped_gemm_mma_sync_form_matches_cpu) {
  REQUIRE_GPU();
  using mr = moe_rows;
  const scoped_env env("TANDEM_QGEMM_WGMMA", "0");
  const gemm_case plain[] = {
      {ggml_type::q4_k, 37, 4, 8, 512, 200, mr::by_token, mr::grouped, 0, 2},
      {ggml_type::q6_k, 90, 4, 6, 768, 130, mr::grouped, mr::by_pair, 2, 1},
      {ggml_type::q6_k, 200, 8, 4, 256, 64, mr::by_token, mr::grouped, 1, 2},
  };
  for (const auto& c : plain) check_gemm(c);
  const gemm_case fused[] = {
      {ggml_type::q4_k, 37, 8, 16, 2048, 64, mr::by_token, mr::by_pair, 0, 2},
      {ggml_type::q6_k, 90, 4, 6, 768, 130, mr::grouped, mr::by_pair, 2, 2},
  };
  for (const auto& c : fused) check_gemm_swiglu(c);
  check_items_are_one_tile_bits();
}

TEST(moe, grouped_gemm_swiglu_rejects_bad_arguments) {
  REQUIRE_GPU();
  const int n_expert = 4, n_tok = 3, k = 2;
  const auto ex = make_experts(ggml_type::q4_k, n_expert, 256, 64, 3);
  const grouping g = group_cpu(random_ids(n_tok, k, n_expert, 8), n_expert);
  dev<int32_t> offsets(g.offsets), perm(g.perm), tiles(g.tiles);
  dev<uint8_t> w(ex.q), work(moe_gemm_work_bytes(256, n_tok));
  dev<float> x(size_t(n_tok * 256)), h(size_t(n_tok * k * 64)), u(size_t(n_tok * k * 64));
  const auto run = [&](const moe_matvec_output* o, int toks) {
    return launch_moe_gemm_swiglu(ggml_type::q4_k, o, ex.stride, n_expert, 256, 64, x.p, moe_rows::by_token,
                                  moe_rows::grouped, toks, k, offsets.p, perm.p, tiles.p, work.p, nullptr);
  };
  const moe_matvec_output same[2] = {{w.p, h.p}, {w.p, h.p}}, no_up[2] = {{w.p, h.p}, {w.p, nullptr}},
                          ok[2] = {{w.p, h.p}, {w.p, u.p}};
  EXPECT_EQ(run(same, n_tok), cudaErrorInvalidValue);  // up's scratch is h
  EXPECT_EQ(run(no_up, n_tok), cudaErrorInvalidValue);
  EXPECT_EQ(run(ok, 0), cudaSuccess);
  dev<uint16_t> h16(size_t(n_tok * k * 64 + 8));
  const moe_gemm_f16 odd{nullptr, h16.p + 1};
  EXPECT_EQ(launch_moe_gemm_swiglu(ggml_type::q4_k, ok, ex.stride, n_expert, 256, 64, x.p, moe_rows::by_token,
                                   moe_rows::grouped, n_tok, k, offsets.p, perm.p, tiles.p, work.p, nullptr, odd),
            cudaErrorMisalignedAddress);
  const moe_matvec_output one[1] = {{w.p, h.p}};
  EXPECT_EQ(launch_moe_gemm(ggml_type::q4_k, one, 1, ex.stride, n_expert, 256, 64, x.p, moe_rows::by_token,
                            moe_rows::grouped, n_tok, k, offsets.p, perm.p, tiles.p, work.p, nullptr, {nullptr, h16.p}),
            cudaErrorInvalidValue);  // h16 is the SwiGLU's
  EXPECT_EQ(launch_moe_gemm(ggml_type::q4_k, one, 1, ex.stride, n_expert, 256, 64, nullptr, moe_rows::by_token,
                            moe_rows::grouped, n_tok, k, offsets.p, perm.p, tiles.p, nullptr, nullptr),
            cudaErrorInvalidValue);  // neither x nor x16
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ---- Benchmarks ---------------------------------------------------------------------------

// Prefill: 2048 tokens, top-8 of 128 experts, gate+up (2048 -> 768 x 2) and down (768 -> 2048),
// Q4_K: TFLOPS counted on the active FLOPs (2 n_tok k n_in n_out per matrix).
TEST(big, moe_prefill_tflops) {
  REQUIRE_GPU();
  const int n_tok = 2048, n_expert = 128, k = 8;
  const int64_t n_embd = 2048, n_ff = 768;
  const auto ids = random_ids(n_tok, k, n_expert, 4);
  const grouping g = group_cpu(ids, n_expert);
  dev<int32_t> offsets(g.offsets), perm(g.perm), tiles(g.tiles);
  const auto tile = quantize_matrix(ggml_type::q4_k, randoms(size_t(n_embd * 64), 1), n_embd, 64);
  const size_t rb_up = *row_bytes(ggml_type::q4_k, n_embd), rb_dn = *row_bytes(ggml_type::q4_k, n_ff);
  std::vector<uint8_t> wup(rb_up * n_ff * n_expert), wdn(rb_dn * n_embd * n_expert);
  for (size_t i = 0; i < wup.size(); ++i) wup[i] = tile[i % tile.size()];
  for (size_t i = 0; i < wdn.size(); ++i) wdn[i] = tile[(i % rb_dn) % tile.size()];
  dev<uint8_t> dg(wup), du(wup), dd(wdn), work(moe_gemm_work_bytes(n_embd, int64_t(n_tok) * k));
  dev<float> x(randoms(size_t(n_tok * n_embd), 5)), yg(size_t(n_tok) * k * n_ff), yu(size_t(n_tok) * k * n_ff),
      yd(size_t(n_tok) * k * n_embd);
  const double us_up = time_us([&](int, cudaStream_t s) {
    const moe_matvec_output o[2] = {{dg.p, yg.p}, {du.p, yu.p}};
    launch_moe_gemm(ggml_type::q4_k, o, 2, rb_up * n_ff, n_expert, n_embd, n_ff, x.p, moe_rows::by_token,
                    moe_rows::grouped, n_tok, k, offsets.p, perm.p, tiles.p, work.p, s);
  }, true);
  const double us_dn = time_us([&](int, cudaStream_t s) {
    const moe_matvec_output o{dd.p, yd.p};
    launch_moe_gemm(ggml_type::q4_k, &o, 1, rb_dn * n_embd, n_expert, n_ff, n_embd, yg.p, moe_rows::grouped,
                    moe_rows::by_pair, n_tok, k, offsets.p, perm.p, tiles.p, work.p, s);
  }, true);
  // gate+up then launch_swiglu, against launch_moe_gemm_swiglu (one launch on the fragment blocks).
  const double us_up_sw = time_us([&](int, cudaStream_t s) {
    const moe_matvec_output o[2] = {{dg.p, yg.p}, {du.p, yu.p}};
    launch_moe_gemm(ggml_type::q4_k, o, 2, rb_up * n_ff, n_expert, n_embd, n_ff, x.p, moe_rows::by_token,
                    moe_rows::grouped, n_tok, k, offsets.p, perm.p, tiles.p, work.p, s);
    launch_swiglu(yg.p, yu.p, yg.p, int64_t(n_tok) * k * n_ff, s);
  }, true);
  const double us_fused = time_us([&](int, cudaStream_t s) {
    const moe_matvec_output o[2] = {{dg.p, yg.p}, {du.p, yu.p}};
    launch_moe_gemm_swiglu(ggml_type::q4_k, o, rb_up * n_ff, n_expert, n_embd, n_ff, x.p, moe_rows::by_token,
                           moe_rows::grouped, n_tok, k, offsets.p, perm.p, tiles.p, work.p, s);
  }, true);
  const double flops = 2.0 * n_tok * k * n_embd * n_ff;
  std::printf("moe prefill q4_k 2048 tok: gate+up %.0f us (%.1f TFLOPS), down %.0f us (%.1f TFLOPS)\n", us_up,
              2 * flops / us_up / 1e6, us_dn, flops / us_dn / 1e6);
  std::printf("moe prefill q4_k 2048 tok: gate+up+swiglu %.0f us unfused, %.0f us fused (%.1f TFLOPS)\n", us_up_sw,
              us_fused, 2 * flops / us_fused / 1e6);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
}

// Qwen3.5-35B-A3B's down projection at prefill: 2048 tokens, top-8 of 256 experts, 512 -> 2048,
// Q4_K and Q6_K (Q4_K_M's two kinds of down experts): TFLOPS on the active FLOPs with the short-K
// grouped blocks off (TANDEM_QGEMM_GROUPED_ITEMS=0: one column tile a block), at their default
// column tiles a block (4), and at 8 and 16; each checked against the first's bits.
TEST(big, moe_prefill_down_35b) {
  REQUIRE_GPU();
  const int n_tok = 2048, n_expert = 256, k = 8;
  const int64_t n_embd = 2048, n_ff = 512, n_pairs = int64_t(n_tok) * k;
  const grouping g = group_cpu(random_ids(n_tok, k, n_expert, 4), n_expert);
  dev<int32_t> offsets(g.offsets), perm(g.perm), tiles(g.tiles);
  dev<uint8_t> work(moe_gemm_work_bytes(n_ff, n_pairs));
  dev<float> x(randoms(size_t(n_pairs * n_ff), 5)), y(size_t(n_pairs * n_embd));
  const double flops = 2.0 * n_pairs * n_ff * n_embd;
  for (const ggml_type t : {ggml_type::q4_k, ggml_type::q6_k}) {
    // 64 quantized rows repeated: each expert is rb * n_embd bytes, a whole number of tiles.
    const auto tile = quantize_matrix(t, randoms(size_t(n_ff * 64), 1), n_ff, 64);
    const size_t stride = *row_bytes(t, n_ff) * n_embd;
    std::vector<uint8_t> wh(stride * n_expert);
    for (size_t i = 0; i < wh.size(); ++i) wh[i] = tile[i % tile.size()];
    dev<uint8_t> w(wh);
    const moe_matvec_output o{w.p, y.p};
    std::vector<float> want;
    for (const char* items : {"0", static_cast<const char*>(nullptr), "8", "16"}) {
      const scoped_env env("TANDEM_QGEMM_GROUPED_ITEMS", items);
      const double us = time_us([&](int, cudaStream_t s) {
        launch_moe_gemm(t, &o, 1, stride, n_expert, n_ff, n_embd, x.p, moe_rows::grouped, moe_rows::by_pair, n_tok,
                        k, offsets.p, perm.p, tiles.p, work.p, s);
      }, true);
      const auto got = y.host();
      const char* name = items ? items : "default";
      std::printf("moe prefill down %s 35B (256 x 2048x512, 2048 tok, k 8), items %s: %.1f us (%.1f TFLOPS)\n",
                  std::string(type_name(t)).c_str(), name, us, flops / us / 1e6);
      if (want.empty()) want = got;
      else EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "items " << name;
    }
  }
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace tandem
