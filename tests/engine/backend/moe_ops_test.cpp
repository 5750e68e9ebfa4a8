// MoE routing (ties, renormalisation, k = 1 and k = n_expert) and the MoE FFN against a dense
// computation of every expert masked by the routing, shared expert included, on quantized weights.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "backend/cpu/moe_ops.h"
#include "backend/cpu/thread_pool.h"
#include "quant/quant.h"
#include "tiny_model.h"

namespace tandem {
namespace {

TEST(moe_route, top_k_in_descending_order_with_softmax_weights) {
  const std::vector<float> logits = {0.5f, 2.f, -1.f, 1.f, 3.f, 0.f};
  std::vector<int32_t> ids(3);
  std::vector<float> w(3);
  moe_route(logits.data(), 1, 6, 3, false, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{4, 1, 3}));
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - 3.0);
  EXPECT_NEAR(w[0], 1.0 / sum, 1e-6);
  EXPECT_NEAR(w[1], std::exp(-1.0) / sum, 1e-6);
  EXPECT_NEAR(w[2], std::exp(-2.0) / sum, 1e-6);
  moe_route(logits.data(), 1, 6, 3, true, ids.data(), w.data());
  const double sel = 1.0 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(w[0], 1.0 / sel, 1e-6);
  EXPECT_NEAR(w[2], std::exp(-2.0) / sel, 1e-6);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
}

TEST(moe_route, ties_go_to_the_lower_expert_id) {
  // Experts 1, 3 and 5 tie for first, 0 and 4 for the last places.
  const std::vector<float> logits = {0.25f, 1.f, -2.f, 1.f, 0.25f, 1.f};
  std::vector<int32_t> ids(4);
  std::vector<float> w(4);
  moe_route(logits.data(), 1, 6, 4, true, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 5, 0}));
  EXPECT_EQ(w[0], w[1]);
  EXPECT_EQ(w[1], w[2]);
  EXPECT_LT(w[3], w[2]);
  // All equal: the first k ids, equal weights 1/k.
  const std::vector<float> flat(8, 0.5f);
  std::vector<int32_t> ids2(3);
  std::vector<float> w2(3);
  moe_route(flat.data(), 1, 8, 3, true, ids2.data(), w2.data());
  EXPECT_EQ(ids2, (std::vector<int32_t>{0, 1, 2}));
  for (float x : w2) EXPECT_NEAR(x, 1.f / 3, 1e-7);
  // A NaN logit sorts last rather than breaking the order.
  const std::vector<float> nan = {std::nanf(""), 0.f, 1.f};
  moe_route(nan.data(), 1, 3, 2, true, ids2.data(), w2.data());
  EXPECT_EQ(ids2[0], 2);
  EXPECT_EQ(ids2[1], 1);
}

TEST(moe_route, k_one_and_k_all_and_several_tokens) {
  const std::vector<float> logits = test::random_floats(5 * 16, 7, -3.f, 3.f);
  std::vector<int32_t> ids(5);
  std::vector<float> w(5);
  moe_route(logits.data(), 5, 16, 1, true, ids.data(), w.data());
  for (int t = 0; t < 5; ++t) {
    const float* l = logits.data() + t * 16;
    EXPECT_EQ(ids[t], std::max_element(l, l + 16) - l);
    EXPECT_FLOAT_EQ(w[t], 1.f);  // renormalised over one expert
  }
  moe_route(logits.data(), 5, 16, 1, false, ids.data(), w.data());
  for (float x : w) EXPECT_LT(x, 1.f);
  // k = n_expert: every expert once, weights the full softmax (sums to 1 either way).
  std::vector<int32_t> all(5 * 16);
  std::vector<float> wa(5 * 16);
  moe_route(logits.data(), 5, 16, 16, false, all.data(), wa.data());
  for (int t = 0; t < 5; ++t) {
    std::vector<int32_t> sorted(all.begin() + t * 16, all.begin() + t * 16 + 16);
    std::sort(sorted.begin(), sorted.end());
    std::vector<int32_t> want(16);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(sorted, want);
    EXPECT_NEAR(std::accumulate(wa.begin() + t * 16, wa.begin() + t * 16 + 16, 0.0), 1.0, 1e-5);
    for (int j = 1; j < 16; ++j) EXPECT_GE(wa[t * 16 + j - 1], wa[t * 16 + j]);
  }
}

// A weight matrix {n_in, rows} of `type` with its dequantized copy.
struct matrix {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // dequantized, rows × n_in
  weight_view view;
};

matrix make_matrix(ggml_type type, int64_t n_in, int64_t rows, uint64_t seed) {
  matrix m;
  const float a = 1.5f / std::sqrt(float(n_in));
  const std::vector<float> v = test::random_floats(size_t(n_in * rows), seed, -a, a);
  const uint64_t rb = *row_bytes(type, n_in);
  m.bytes.resize(rb * rows);
  m.values.resize(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(type, v.data() + r * n_in, m.bytes.data() + r * rb, n_in);
    dequantize_row(type, m.bytes.data() + r * rb, m.values.data() + r * n_in, n_in);
  }
  m.view = {type, m.bytes.data(), n_in, rows, rb};
  return m;
}

// y = W x for one row block of a dequantized matrix, in double.
std::vector<double> dense(const std::vector<float>& W, int64_t row0, int64_t rows, int64_t n_in, const double* x) {
  std::vector<double> y(rows, 0.0);
  for (int64_t o = 0; o < rows; ++o)
    for (int64_t i = 0; i < n_in; ++i) y[o] += double(W[(row0 + o) * n_in + i]) * x[i];
  return y;
}

std::vector<double> swiglu_dense(const matrix& g, const matrix& u, const matrix& d, int64_t e, int64_t F, int64_t E,
                                 const double* x) {
  auto gv = dense(g.values, e * F, F, E, x), uv = dense(u.values, e * F, F, E, x);
  for (int64_t i = 0; i < F; ++i) gv[i] = gv[i] / (1 + std::exp(-gv[i])) * uv[i];
  return dense(d.values, e * E, E, F, gv.data());
}

void check_against_dense(ggml_type type, bool shared, int k, bool renorm) {
  const int64_t E = 64, F = 32, FS = 96, T = 7;
  const int NE = 6;
  moe_weights w;
  matrix router = make_matrix(ggml_type::f32, E, NE, 1);
  matrix g = make_matrix(type, E, F * NE, 2), u = make_matrix(type, E, F * NE, 3), d = make_matrix(type, F, E * NE, 4);
  matrix gs = make_matrix(type, E, FS, 5), us = make_matrix(type, E, FS, 6), ds = make_matrix(type, FS, E, 7);
  w.router = router.view;
  w.gate_exps = g.view, w.up_exps = u.view, w.down_exps = d.view;
  w.n_expert = NE, w.n_used = k, w.n_ff_exp = F, w.renorm = renorm;
  if (shared) {
    w.shexp_gate = test::random_floats(E, 8, -0.3f, 0.3f);
    w.gate_shexp = gs.view, w.up_shexp = us.view, w.down_shexp = ds.view;
    w.n_ff_shexp = FS;
  }
  const std::vector<float> x = test::random_floats(size_t(T * E), 9, -1.f, 1.f);
  std::vector<float> out(T * E);
  thread_pool pool(2);
  moe_scratch s;
  moe_ffn(pool, w, x.data(), T, E, out.data(), s);

  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> xd(x.begin() + t * E, x.begin() + (t + 1) * E);
    // Every expert densely, then the routing as a mask over them.
    auto logits = dense(router.values, 0, NE, E, xd.data());
    std::vector<float> lf(logits.begin(), logits.end());
    std::vector<int32_t> ids(k);
    std::vector<float> wt(k);
    moe_route(lf.data(), 1, NE, k, renorm, ids.data(), wt.data());
    std::vector<double> mask(NE, 0.0), want(E, 0.0);
    for (int j = 0; j < k; ++j) mask[ids[j]] = wt[j];
    for (int e = 0; e < NE; ++e) {
      const auto y = swiglu_dense(g, u, d, e, F, E, xd.data());
      for (int64_t i = 0; i < E; ++i) want[i] += mask[e] * y[i];
    }
    if (shared) {
      double dot = 0;
      for (int64_t i = 0; i < E; ++i) dot += w.shexp_gate[i] * xd[i];
      const auto y = swiglu_dense(gs, us, ds, 0, FS, E, xd.data());
      for (int64_t i = 0; i < E; ++i) want[i] += y[i] / (1 + std::exp(-dot));
    }
    double scale = 1e-6, diff = 0;
    for (int64_t i = 0; i < E; ++i) {
      scale = std::max(scale, std::fabs(want[i]));
      diff = std::max(diff, std::fabs(want[i] - out[t * E + i]));
    }
    // Quantized types also round x to q8 blocks inside vec_dot: a percent or so.
    const double tol = type == ggml_type::f32 ? 1e-5 : 3e-2;
    EXPECT_LT(diff / scale, tol) << "token " << t << " type " << type_name(type);
  }
}

TEST(moe_ffn, equals_all_experts_masked_by_the_routing) {
  check_against_dense(ggml_type::f32, false, 2, true);
  check_against_dense(ggml_type::f32, true, 2, true);
  check_against_dense(ggml_type::f32, false, 1, false);
  check_against_dense(ggml_type::f32, true, 6, false);
  check_against_dense(ggml_type::q8_0, true, 3, true);
  check_against_dense(ggml_type::q4_0, false, 2, true);
}

TEST(moe_ffn, batch_rows_are_independent) {
  const int64_t E = 64, F = 32, T = 5;
  matrix router = make_matrix(ggml_type::f32, E, 4, 11);
  matrix g = make_matrix(ggml_type::q8_0, E, F * 4, 12), u = make_matrix(ggml_type::q8_0, E, F * 4, 13),
         d = make_matrix(ggml_type::q8_0, F, E * 4, 14);
  moe_weights w;
  w.router = router.view, w.gate_exps = g.view, w.up_exps = u.view, w.down_exps = d.view;
  w.n_expert = 4, w.n_used = 2, w.n_ff_exp = F;
  const std::vector<float> x = test::random_floats(size_t(T * E), 15, -1.f, 1.f);
  thread_pool pool(2);
  moe_scratch s;
  std::vector<float> all(T * E), one(E);
  moe_ffn(pool, w, x.data(), T, E, all.data(), s);
  for (int64_t t = 0; t < T; ++t) {
    moe_ffn(pool, w, x.data() + t * E, 1, E, one.data(), s);
    for (int64_t i = 0; i < E; ++i) EXPECT_EQ(one[i], all[t * E + i]) << t << "," << i;
  }
}

TEST(moe_ffn, reads_only_the_selected_experts) {
  const int64_t E = 64, F = 32;
  const int NE = 8;
  matrix router = make_matrix(ggml_type::f32, E, NE, 21);
  matrix g = make_matrix(ggml_type::f32, E, F * NE, 22), u = make_matrix(ggml_type::f32, E, F * NE, 23),
         d = make_matrix(ggml_type::f32, F, E * NE, 24);
  moe_weights w;
  w.router = router.view, w.gate_exps = g.view, w.up_exps = u.view, w.down_exps = d.view;
  w.n_expert = NE, w.n_used = 2, w.n_ff_exp = F;
  const std::vector<float> x = test::random_floats(size_t(E), 25, -1.f, 1.f);
  thread_pool pool(1);
  moe_scratch s;
  std::vector<float> before(E), after(E);
  moe_ffn(pool, w, x.data(), 1, E, before.data(), s);
  std::vector<bool> used(NE, false);
  for (int32_t id : s.ids) used[id] = true;
  // Poison every expert the token did not select: NaN anywhere it was read would show.
  float* gate = reinterpret_cast<float*>(g.bytes.data());
  float* down = reinterpret_cast<float*>(d.bytes.data());
  for (int e = 0; e < NE; ++e) {
    if (used[e]) continue;
    std::fill_n(gate + e * F * E, F * E, std::nanf(""));
    std::fill_n(down + e * E * F, E * F, std::nanf(""));
  }
  moe_ffn(pool, w, x.data(), 1, E, after.data(), s);
  EXPECT_EQ(before, after);
}

}  // namespace
}  // namespace tandem
