// CPU reference for the Gated DeltaNet operations (see delta_net_ops.h): plain float32 loops, no SIMD,
// written for clarity; the CUDA kernels and the chunked prefill form are checked against these.
#include "backend/cpu/delta_net_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem {

namespace {

float silu(float x) { return x / (1.f + std::exp(-x)); }

float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// PyTorch's F.softplus with threshold 20: above it log1p(exp(x)) equals x in float anyway, and
// exp would overflow for large x.
float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

}  // namespace

void causal_conv1d_silu(const float* x, int64_t x_stride, const float* w, int64_t T, int C, int K, float* state,
                        float* out) {
  const int64_t hist = K - 1;
  // Input row r of the combined sequence (old state history ++ x): r < 0 reads the state.
  auto input = [&](int64_t r, int c) { return r >= 0 ? x[r * x_stride + c] : state[(hist + r) * C + c]; };
  for (int64_t t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) {
      float acc = 0.f;
      for (int j = 0; j < K; ++j) acc += w[static_cast<int64_t>(c) * K + j] * input(t - hist + j, c);
      out[t * C + c] = silu(acc);
    }
  }
  // The new state is the last K-1 inputs; built aside first since for T < K-1 it reads the old state.
  std::vector<float> next(static_cast<size_t>(hist * C));
  for (int64_t i = 0; i < hist; ++i)
    for (int c = 0; c < C; ++c) next[i * C + c] = input(T - hist + i, c);
  std::copy(next.begin(), next.end(), state);
}

void delta_net_gates(const float* a, const float* b, const float* a_decay, const float* dt_bias, int64_t T, int Hv,
                     float* g, float* beta) {
  for (int64_t i = 0; i < T * Hv; ++i) {
    const int64_t h = i % Hv;
    beta[i] = sigmoid(b[i]);
    g[i] = a_decay[h] * softplus(a[i] + dt_bias[h]);
  }
}

void l2_norm_rows(float* x, int64_t n, int d, int64_t stride, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    float* row = x + r * stride;
    float ss = 0.f;
    for (int i = 0; i < d; ++i) ss += row[i] * row[i];
    const float inv = 1.f / std::sqrt(ss + eps);
    for (int i = 0; i < d; ++i) row[i] *= inv;
  }
}

void rms_norm_gated(const float* o, const float* w, const float* z, float* out, int64_t n, int d, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    const float* orow = o + r * d;
    const float* zrow = z + r * d;
    float ss = 0.f;
    for (int i = 0; i < d; ++i) ss += orow[i] * orow[i];
    const float inv = 1.f / std::sqrt(ss / static_cast<float>(d) + eps);
    for (int i = 0; i < d; ++i) out[r * d + i] = orow[i] * inv * w[i] * silu(zrow[i]);
  }
}

namespace {

// Row pointers of token t for v-head h (and its k-head h % Hk).
const float* q_row(const delta_rule_args& a, int64_t t, int h) { return a.q + t * a.qk_stride + (h % a.Hk) * a.dk; }
const float* k_row(const delta_rule_args& a, int64_t t, int h) { return a.k + t * a.qk_stride + (h % a.Hk) * a.dk; }
const float* v_row(const delta_rule_args& a, int64_t t, int h) { return a.v + t * a.v_stride + h * a.dv; }
float* out_row(const delta_rule_args& a, int64_t t, int h) { return a.out + (t * a.Hv + h) * a.dv; }
float* state_of(const delta_rule_args& a, int h) { return a.S + static_cast<int64_t>(h) * a.dk * a.dv; }

float dot(const float* x, const float* y, int n) {
  float acc = 0.f;
  for (int i = 0; i < n; ++i) acc += x[i] * y[i];
  return acc;
}

// One token of one v-head: S = exp(g) S; d = beta (v - S^T k); S += k d^T; o = S^T q * scale.
void recurrent_step(const delta_rule_args& a, int64_t t, int h, float scale, float* delta) {
  const int dk = a.dk, dv = a.dv;
  const float* q = q_row(a, t, h);
  const float* k = k_row(a, t, h);
  const float* v = v_row(a, t, h);
  const float decay = std::exp(a.g[t * a.Hv + h]);
  const float beta = a.beta[t * a.Hv + h];
  float* S = state_of(a, h);
  for (int64_t i = 0; i < static_cast<int64_t>(dk) * dv; ++i) S[i] *= decay;
  for (int j = 0; j < dv; ++j) delta[j] = 0.f;
  for (int i = 0; i < dk; ++i)
    for (int j = 0; j < dv; ++j) delta[j] += S[i * dv + j] * k[i];
  for (int j = 0; j < dv; ++j) delta[j] = beta * (v[j] - delta[j]);
  float* o = out_row(a, t, h);
  for (int j = 0; j < dv; ++j) o[j] = 0.f;
  for (int i = 0; i < dk; ++i) {
    for (int j = 0; j < dv; ++j) {
      S[i * dv + j] += k[i] * delta[j];
      o[j] += S[i * dv + j] * q[i];
    }
  }
  for (int j = 0; j < dv; ++j) o[j] *= scale;
}

}  // namespace

void gated_delta_rule_recurrent(const delta_rule_args& a) {
  const float scale = 1.f / std::sqrt(static_cast<float>(a.dk));
  std::vector<float> delta(static_cast<size_t>(a.dv));
  for (int64_t t = 0; t < a.T; ++t)
    for (int h = 0; h < a.Hv; ++h) recurrent_step(a, t, h, scale, delta.data());
}

namespace {

// The chunked form for one v-head and one chunk of n tokens starting at t0. With c_i the cumulative
// log decay inside the chunk (c_i = g_0 + ... + g_i), the n delta-rule updates collapse into
//   (I + L) U = beta V,  (I + L) W = beta exp(c) K,  L[i][j] = beta_i (k_i.k_j) exp(c_i - c_j), j < i,
//   V' = U - W S,  o_i = exp(c_i) S^T q_i + sum_{j<=i} (q_i.k_j) exp(c_i - c_j) V'_j,
//   S <- exp(c_last) S + sum_j exp(c_last - c_j) k_j V'_j^T.
// Every exp has a non-positive argument, so nothing overflows (a partial chunk needs no padding).
struct chunk_work {
  std::vector<float> c;  // [n] cumulative log decay
  std::vector<float> L;  // [n][n] strictly lower part of the UT system
  std::vector<float> u;  // [n][dv] U, then V'
  std::vector<float> w;  // [n][dk] W
};

void build_ut_system(const delta_rule_args& a, int h, int64_t t0, int n, chunk_work& cw) {
  const int dk = a.dk, dv = a.dv;
  float cum = 0.f;
  for (int i = 0; i < n; ++i) cw.c[i] = (cum += a.g[(t0 + i) * a.Hv + h]);
  for (int i = 0; i < n; ++i) {
    const float beta = a.beta[(t0 + i) * a.Hv + h];
    const float* ki = k_row(a, t0 + i, h);
    for (int j = 0; j < i; ++j)
      cw.L[i * n + j] = beta * dot(ki, k_row(a, t0 + j, h), dk) * std::exp(cw.c[i] - cw.c[j]);
    const float* vi = v_row(a, t0 + i, h);
    for (int j = 0; j < dv; ++j) cw.u[i * dv + j] = beta * vi[j];
    const float kscale = beta * std::exp(cw.c[i]);
    for (int j = 0; j < dk; ++j) cw.w[i * dk + j] = kscale * ki[j];
  }
}

// Replaces X ([n][width]) by (I + L)^-1 X, forward substitution; L is strictly lower triangular.
void forward_substitute(const std::vector<float>& L, int n, float* X, int width) {
  for (int i = 1; i < n; ++i)
    for (int j = 0; j < i; ++j) {
      const float lij = L[i * n + j];
      for (int col = 0; col < width; ++col) X[i * width + col] -= lij * X[j * width + col];
    }
}

// V' = U - W S (in cw.u), then the chunk's outputs, then the state handed to the next chunk.
void apply_chunk(const delta_rule_args& a, int h, int64_t t0, int n, float scale, chunk_work& cw) {
  const int dk = a.dk, dv = a.dv;
  float* S = state_of(a, h);
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < dk; ++r) {
      const float wr = cw.w[i * dk + r];
      for (int j = 0; j < dv; ++j) cw.u[i * dv + j] -= wr * S[r * dv + j];
    }
  for (int i = 0; i < n; ++i) {
    const float* q = q_row(a, t0 + i, h);
    float* o = out_row(a, t0 + i, h);
    const float qdecay = std::exp(cw.c[i]);
    for (int j = 0; j < dv; ++j) o[j] = 0.f;
    for (int r = 0; r < dk; ++r)
      for (int j = 0; j < dv; ++j) o[j] += qdecay * q[r] * S[r * dv + j];
    for (int m = 0; m <= i; ++m) {
      const float att = dot(q, k_row(a, t0 + m, h), dk) * std::exp(cw.c[i] - cw.c[m]);
      for (int j = 0; j < dv; ++j) o[j] += att * cw.u[m * dv + j];
    }
    for (int j = 0; j < dv; ++j) o[j] *= scale;
  }
  const float c_last = cw.c[n - 1];
  const float chunk_decay = std::exp(c_last);
  for (int64_t i = 0; i < static_cast<int64_t>(dk) * dv; ++i) S[i] *= chunk_decay;
  for (int m = 0; m < n; ++m) {
    const float* k = k_row(a, t0 + m, h);
    const float kdecay = std::exp(c_last - cw.c[m]);
    for (int r = 0; r < dk; ++r)
      for (int j = 0; j < dv; ++j) S[r * dv + j] += kdecay * k[r] * cw.u[m * dv + j];
  }
}

}  // namespace

void gated_delta_rule_chunked(const delta_rule_args& a, int chunk) {
  chunk = std::max(chunk, 1);
  const float scale = 1.f / std::sqrt(static_cast<float>(a.dk));
  chunk_work cw;
  cw.c.resize(static_cast<size_t>(chunk));
  for (int64_t t0 = 0; t0 < a.T; t0 += chunk) {
    const int n = static_cast<int>(std::min<int64_t>(chunk, a.T - t0));
    cw.L.assign(static_cast<size_t>(n) * n, 0.f);
    cw.u.resize(static_cast<size_t>(n) * a.dv);
    cw.w.resize(static_cast<size_t>(n) * a.dk);
    for (int h = 0; h < a.Hv; ++h) {
      build_ut_system(a, h, t0, n, cw);
      forward_substitute(cw.L, n, cw.u.data(), a.dv);
      forward_substitute(cw.L, n, cw.w.data(), a.dk);
      apply_chunk(a, h, t0, n, scale, cw);
    }
  }
}

}  // namespace tandem
