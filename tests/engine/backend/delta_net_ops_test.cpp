// The Gated DeltaNet CPU ops against naive double-precision formulas, and the chunked delta rule
// against the recurrent one (random, never zero inputs; the state is nonzero at the start).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/delta_net_ops.h"
#include "tiny_model.h"

namespace tandem {
namespace {

using test::random_floats;

double silu_ref(double x) { return x / (1 + std::exp(-x)); }

// Every element within rel * max|want| of want.
template <typename G, typename W>
void expect_close(const std::vector<G>& got, const std::vector<W>& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (auto w : want) scale = std::max(scale, std::abs(double(w)));
  ASSERT_GT(scale, 0) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(double(got[i]), double(want[i]), rel * scale) << what << " at " << i;
}

// ---- causal conv ----

// out[t][c] = silu(sum_j w[c][j] seq[t + j][c]) with seq = state rows ++ x rows; new state = last K-1 rows.
void conv_ref(const std::vector<float>& x, int64_t stride, const std::vector<float>& w, int64_t T, int C, int K,
              std::vector<float>& state, std::vector<double>& out) {
  std::vector<double> seq;
  for (int64_t r = 0; r < K - 1; ++r)
    for (int c = 0; c < C; ++c) seq.push_back(state[r * C + c]);
  for (int64_t t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) seq.push_back(x[t * stride + c]);
  out.assign(T * C, 0);
  for (int64_t t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      double acc = 0;
      for (int j = 0; j < K; ++j) acc += double(w[c * K + j]) * seq[(t + j) * C + c];
      out[t * C + c] = silu_ref(acc);
    }
  const int64_t rows = K - 1 + T;
  for (int64_t r = 0; r < K - 1; ++r)
    for (int c = 0; c < C; ++c) state[r * C + c] = float(seq[(rows - (K - 1) + r) * C + c]);
}

void check_conv_against_ref(int64_t T, int C, int K, uint64_t seed) {
  const int64_t stride = C + 3;  // rows of x lie apart, as in a wider activation buffer
  auto x = random_floats(T * stride, seed, -2, 2);
  auto w = random_floats(C * K, seed + 1, -1, 1);
  auto state = random_floats((K - 1) * C, seed + 2, -2, 2);
  auto want_state = state;
  std::vector<double> want;
  conv_ref(x, stride, w, T, C, K, want_state, want);
  std::vector<float> out(T * C);
  causal_conv1d_silu(x.data(), stride, w.data(), T, C, K, state.data(), out.data());
  expect_close(out, want, 1e-5, "conv out");
  expect_close(state, want_state, 1e-7, "conv state");
}

TEST(delta_net_ops, conv_matches_formula) { check_conv_against_ref(9, 7, 4, 10); }

TEST(delta_net_ops, conv_fewer_rows_than_history) {
  check_conv_against_ref(2, 5, 4, 20);
  check_conv_against_ref(1, 5, 4, 30);
  check_conv_against_ref(3, 6, 5, 40);
}

TEST(delta_net_ops, conv_one_row_at_a_time_equals_all_rows) {
  const int64_t T = 11;
  const int C = 6, K = 4;
  auto x = random_floats(T * C, 50, -2, 2);
  auto w = random_floats(C * K, 51, -1, 1);
  const auto state0 = random_floats((K - 1) * C, 52, -2, 2);
  auto state_all = state0, state_step = state0;
  std::vector<float> out_all(T * C), out_step(T * C);
  causal_conv1d_silu(x.data(), C, w.data(), T, C, K, state_all.data(), out_all.data());
  for (int64_t t = 0; t < T; ++t)
    causal_conv1d_silu(x.data() + t * C, C, w.data(), 1, C, K, state_step.data(), out_step.data() + t * C);
  expect_close(out_step, out_all, 1e-6, "conv out");
  expect_close(state_step, state_all, 0, "conv state");
}

// ---- gates and norms ----

TEST(delta_net_ops, gates_match_formula) {
  const int64_t T = 5;
  const int Hv = 6;
  auto a = random_floats(T * Hv, 60, -6, 6), b = random_floats(T * Hv, 61, -6, 6);
  a[3] = 30.f;  // past softplus's threshold of 20
  a[7] = 80.f;
  a[8] = -40.f;
  auto a_decay = random_floats(Hv, 62, -8, -0.1f), dt_bias = random_floats(Hv, 63, -1, 1);
  std::vector<float> g(T * Hv), beta(T * Hv);
  delta_net_gates(a.data(), b.data(), a_decay.data(), dt_bias.data(), T, Hv, g.data(), beta.data());
  std::vector<double> want_g(T * Hv), want_beta(T * Hv);
  for (int64_t i = 0; i < T * Hv; ++i) {
    const int h = int(i % Hv);
    want_beta[i] = 1 / (1 + std::exp(-double(b[i])));
    want_g[i] = a_decay[h] * std::log1p(std::exp(double(a[i]) + dt_bias[h]));
  }
  for (int64_t i = 0; i < T * Hv; ++i) {
    EXPECT_NEAR(g[i], want_g[i], 1e-5 * std::max(1.0, std::abs(want_g[i]))) << "g at " << i;
    EXPECT_NEAR(beta[i], want_beta[i], 1e-6) << "beta at " << i;
    EXPECT_LE(g[i], 0.f);
  }
}

TEST(delta_net_ops, l2_norm_rows_match_formula) {
  const int64_t n = 7, stride = 40;
  const int d = 33;
  const float eps = 1e-6f;
  auto x = random_floats(n * stride, 70, -3, 3);
  const auto x0 = x;
  l2_norm_rows(x.data(), n, d, stride, eps);
  std::vector<double> want(x0.begin(), x0.end());  // the gaps between rows stay as they were
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += double(x0[r * stride + i]) * x0[r * stride + i];
    for (int i = 0; i < d; ++i) want[r * stride + i] = x0[r * stride + i] / std::sqrt(ss + eps);
  }
  expect_close(x, want, 1e-6, "l2_norm_rows");
}

TEST(delta_net_ops, rms_norm_gated_matches_formula) {
  const int64_t n = 5;
  const int d = 48;
  const float eps = 1e-6f;
  auto o = random_floats(n * d, 80, -2, 2), z = random_floats(n * d, 81, -4, 4);
  auto w = random_floats(d, 82, 0.5f, 1.5f);
  std::vector<float> out(n * d);
  rms_norm_gated(o.data(), w.data(), z.data(), out.data(), n, d, eps);
  std::vector<double> want(n * d);
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += double(o[r * d + i]) * o[r * d + i];
    const double inv = 1 / std::sqrt(ss / d + eps);
    for (int i = 0; i < d; ++i) want[r * d + i] = o[r * d + i] * inv * w[i] * silu_ref(z[r * d + i]);
  }
  expect_close(out, want, 1e-5, "rms_norm_gated");
}

// ---- the gated delta rule ----

// One sequence's inputs laid out as the conv output is: row t = [q (Hk*dk), k (Hk*dk), v (Hv*dv)].
struct delta_case {
  int64_t T;
  int Hk, Hv, dk, dv;
  int64_t row;  // floats per token row
  std::vector<float> qkv, g, beta, S0;

  delta_case(int64_t T_, int Hk_, int Hv_, int dk_, int dv_, uint64_t seed)
      : T(T_), Hk(Hk_), Hv(Hv_), dk(dk_), dv(dv_), row(2 * Hk_ * dk_ + Hv_ * dv_) {
    qkv = random_floats(T * row, seed, -1, 1);
    for (int64_t t = 0; t < T; ++t)  // q and k heads unit length, as the layer's L2 norm leaves them
      for (int hd = 0; hd < 2 * Hk; ++hd) normalize(qkv.data() + t * row + hd * dk, dk);
    g = random_floats(T * Hv, seed + 1, -1.5f, -0.02f);
    beta = random_floats(T * Hv, seed + 2, 0.05f, 0.95f);
    S0 = random_floats(size_t(Hv) * dk * dv, seed + 3, -1, 1);
  }
  static void normalize(float* x, int n) {
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
    for (int i = 0; i < n; ++i) x[i] = float(x[i] / std::sqrt(ss));
  }
  // Arguments for tokens [t0, t0 + n) with state S and output rows out (n × Hv × dv).
  delta_rule_args args(int64_t t0, int64_t n, float* S, float* out) const {
    delta_rule_args a;
    a.q = qkv.data() + t0 * row;
    a.k = a.q + Hk * dk;
    a.v = a.k + Hk * dk;
    a.qk_stride = a.v_stride = row;
    a.g = g.data() + t0 * Hv;
    a.beta = beta.data() + t0 * Hv;
    a.T = n;
    a.Hk = Hk, a.Hv = Hv, a.dk = dk, a.dv = dv;
    a.S = S;
    a.out = out;
    return a;
  }
  size_t out_size() const { return size_t(T) * Hv * dv; }
};

// Runs all T tokens at once through the recurrent form or the chunked form (chunk > 0).
void run_delta(const delta_case& c, int chunk, std::vector<float>& S, std::vector<float>& out) {
  S = c.S0;
  out.assign(c.out_size(), 0.f);
  const auto a = c.args(0, c.T, S.data(), out.data());
  if (chunk > 0)
    gated_delta_rule_chunked(a, chunk);
  else
    gated_delta_rule_recurrent(a);
}

void check_chunked_equals_recurrent(int64_t T, int Hk, int Hv, int dk, int dv, int chunk, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << "T " << T << " dk " << dk << " dv " << dv << " chunk " << chunk);
  const delta_case c(T, Hk, Hv, dk, dv, seed);
  std::vector<float> S_rec, out_rec, S_chk, out_chk;
  run_delta(c, 0, S_rec, out_rec);
  run_delta(c, chunk, S_chk, out_chk);
  expect_close(out_chk, out_rec, 1e-4, "out");
  expect_close(S_chk, S_rec, 1e-4, "state");
}

TEST(delta_net_ops, chunked_equals_recurrent) {
  for (int64_t T : {1, 5, 64, 65, 200}) {
    check_chunked_equals_recurrent(T, 2, 4, 16, 16, 64, 100 + T);
    check_chunked_equals_recurrent(T, 2, 4, 32, 16, 64, 200 + T);
  }
}

TEST(delta_net_ops, chunked_equals_recurrent_small_chunks) {
  check_chunked_equals_recurrent(50, 2, 4, 16, 16, 7, 300);  // many chunks, a partial last one
  check_chunked_equals_recurrent(50, 2, 4, 16, 32, 1, 301);  // chunk of one token is the recurrence
  check_chunked_equals_recurrent(30, 1, 3, 8, 12, 30, 302);  // one full chunk, dk < dv
}

// Tokens [0, split) then [split, T) with the state carried equals one call over all T.
void check_split_equals_whole(int chunk, int64_t T, int64_t split) {
  SCOPED_TRACE(testing::Message() << "chunk " << chunk << " split " << split);
  const delta_case c(T, 2, 4, 32, 16, 400 + split);
  std::vector<float> S_all, out_all;
  run_delta(c, chunk, S_all, out_all);
  std::vector<float> S = c.S0, out(c.out_size());
  const int64_t per_token = int64_t(c.Hv) * c.dv;
  for (auto [t0, n] : {std::pair<int64_t, int64_t>{0, split}, {split, T - split}}) {
    const auto a = c.args(t0, n, S.data(), out.data() + t0 * per_token);
    if (chunk > 0)
      gated_delta_rule_chunked(a, chunk);
    else
      gated_delta_rule_recurrent(a);
  }
  expect_close(out, out_all, 1e-4, "out");
  expect_close(S, S_all, 1e-4, "state");
}

TEST(delta_net_ops, split_calls_equal_one_call) {
  check_split_equals_whole(0, 90, 1);
  check_split_equals_whole(0, 90, 37);
  check_split_equals_whole(64, 150, 37);
  check_split_equals_whole(64, 150, 64);
  check_split_equals_whole(64, 150, 149);
}

// S_t = (I - beta k k^T) exp(g) S_{t-1} + beta k v^T, o_t = S_t^T q / sqrt(dk), in double with an
// explicit dk × dk matrix: the same rule written the textbook way, not the way the op computes it.
TEST(delta_net_ops, recurrent_matches_direct_formula) {
  const int64_t T = 3;
  const int Hk = 2, Hv = 4, dk = 4, dv = 3;  // v-heads 0,2 read k-head 0; 1,3 read k-head 1
  const delta_case c(T, Hk, Hv, dk, dv, 500);
  std::vector<float> S, out;
  run_delta(c, 0, S, out);
  std::vector<double> want_out(c.out_size()), want_S(c.S0.begin(), c.S0.end());
  for (int h = 0; h < Hv; ++h) {
    double* Sh = want_S.data() + h * dk * dv;
    for (int64_t t = 0; t < T; ++t) {
      const float* q = c.qkv.data() + t * c.row + (h % Hk) * dk;
      const float* k = q + Hk * dk;
      const float* v = c.qkv.data() + t * c.row + 2 * Hk * dk + h * dv;
      const double b = c.beta[t * Hv + h], decay = std::exp(double(c.g[t * Hv + h]));
      std::vector<double> next(dk * dv);
      for (int i = 0; i < dk; ++i)
        for (int j = 0; j < dv; ++j) {
          double acc = b * k[i] * v[j];
          for (int m = 0; m < dk; ++m) acc += ((i == m) - b * k[i] * k[m]) * decay * Sh[m * dv + j];
          next[i * dv + j] = acc;
        }
      std::copy(next.begin(), next.end(), Sh);
      for (int j = 0; j < dv; ++j) {
        double acc = 0;
        for (int i = 0; i < dk; ++i) acc += Sh[i * dv + j] * q[i];
        want_out[(t * Hv + h) * dv + j] = acc / std::sqrt(double(dk));
      }
    }
  }
  expect_close(out, want_out, 1e-5, "out");
  expect_close(S, want_S, 1e-5, "state");
}

}  // namespace
}  // namespace tandem
