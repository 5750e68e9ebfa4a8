// Each CPU op against a naive double-precision formula on random (never zero) inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <set>

#include "backend/cpu/ops.h"
#include "backend/cpu/thread_pool.h"
#include "quant/quant.h"
#include "tiny_model.h"

namespace tandem {
namespace {

using test::random_floats;

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], rel * scale) << what << " at " << i;
}

TEST(ops, rms_norm_matches_formula) {
  const int n = 200;
  auto x = random_floats(n, 1, -3, 3), w = random_floats(n, 2, 0.5f, 1.5f);
  std::vector<float> out(n);
  rms_norm(x.data(), w.data(), out.data(), n, 1e-6f);
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double inv = 1 / std::sqrt(ss / n + 1e-6);
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = x[i] * inv * w[i];
  expect_close(out, want, 1e-6, "rms_norm");
}

// Reference RoPE: normal style treats (x[2i], x[2i+1]) as a complex number and multiplies it by
// e^{i·pos·θ_i}; neox is Hugging Face's x·cos + rotate_half(x)·sin over the first rope_dim dims.
std::vector<double> rope_ref(const std::vector<float>& x, int n_heads, int D, int R, int pos,
                             double theta, rope_style style) {
  std::vector<double> out(x.begin(), x.end());
  for (int h = 0; h < n_heads; ++h) {
    const float* v = x.data() + h * D;
    double* o = out.data() + h * D;
    for (int i = 0; i < R / 2; ++i) {
      const double ang = pos / std::pow(theta, 2.0 * i / R);
      if (style == rope_style::normal) {
        auto z = std::complex<double>(v[2 * i], v[2 * i + 1]) * std::polar(1.0, ang);
        o[2 * i] = z.real();
        o[2 * i + 1] = z.imag();
      } else {
        // cos/sin for dim j and j + R/2 share the angle of i; rotate_half = [-x2, x1].
        o[i] = v[i] * std::cos(ang) - v[i + R / 2] * std::sin(ang);
        o[i + R / 2] = v[i + R / 2] * std::cos(ang) + v[i] * std::sin(ang);
      }
    }
  }
  return out;
}

TEST(ops, rope_normal_and_neox_match_reference) {
  const int H = 3, D = 64;
  for (auto style : {rope_style::normal, rope_style::neox}) {
    for (int R : {64, 32}) {  // full and partial rotation
      for (int pos : {0, 1, 17, 3001}) {
        auto x = random_floats(H * D, 10 + pos + R, -2, 2);
        auto want = rope_ref(x, H, D, R, pos, 1e6, style);
        rope(x.data(), H, D, R, pos, 1e6f, style);
        expect_close(x, want, 2e-6, style == rope_style::normal ? "rope normal" : "rope neox");
      }
    }
  }
}

TEST(ops, rope_styles_differ) {
  auto a = random_floats(64, 3, -1, 1), b = a;
  rope(a.data(), 1, 64, 64, 5, 10000.f, rope_style::normal);
  rope(b.data(), 1, 64, 64, 5, 10000.f, rope_style::neox);
  double diff = 0;
  for (int i = 0; i < 64; ++i) diff += std::abs(a[i] - b[i]);
  EXPECT_GT(diff, 0.1);
}

TEST(ops, swiglu_matches_formula) {
  auto g = random_floats(100, 4, -6, 6), u = random_floats(100, 5, -2, 2);
  std::vector<float> out(100);
  swiglu(g.data(), u.data(), out.data(), 100);
  std::vector<double> want(100);
  for (int i = 0; i < 100; ++i) want[i] = g[i] / (1 + std::exp(-double(g[i]))) * u[i];
  expect_close(out, want, 1e-6, "swiglu");
}

TEST(ops, thread_pool_covers_each_index_once) {
  thread_pool pool(4);
  EXPECT_EQ(pool.size(), 4u);
  for (size_t n : {1u, 7u, 1000u}) {
    std::vector<int> hits(n, 0);
    pool.parallel_for(n, 3, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) ++hits[i];
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << i;
  }
}

// matmul straight from quantized rows equals a double matmul over the dequantized weights.
TEST(ops, matmul_from_quantized_weights) {
  thread_pool pool(3);
  const int64_t n_in = 512, n_out = 37, T = 3;
  auto wf = random_floats(n_in * n_out, 6, -0.5f, 0.5f);
  auto x = random_floats(n_in * T, 7, -1, 1);
  for (ggml_type type : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0,
                         ggml_type::q4_k, ggml_type::q6_k}) {
    const uint64_t rb = *row_bytes(type, n_in);
    std::vector<uint8_t> q(rb * n_out);
    for (int64_t o = 0; o < n_out; ++o) quantize_row(type, wf.data() + o * n_in, q.data() + o * rb, n_in);
    weight_view w{type, q.data(), n_in, n_out, rb};
    std::vector<float> y(T * n_out);
    matmul(pool, w, x.data(), T, y.data());
    std::vector<float> deq(n_in);
    std::vector<double> want(T * n_out), exact(T * n_out);
    for (int64_t o = 0; o < n_out; ++o) {
      dequantize_row(type, q.data() + o * rb, deq.data(), n_in);
      for (int64_t t = 0; t < T; ++t) {
        double s = 0, e = 0;
        for (int64_t i = 0; i < n_in; ++i) {
          s += double(deq[i]) * x[t * n_in + i];
          e += double(wf[o * n_in + i]) * x[t * n_in + i];
        }
        want[t * n_out + o] = s;
        exact[t * n_out + o] = e;
      }
    }
    expect_close(y, want, 1e-5, std::string(type_name(type)).c_str());
    // And the quantization itself stays near the float weights (loose: 4-bit is coarse).
    expect_close(y, exact, type == ggml_type::f32 ? 1e-5 : 0.15, "vs float weights");
  }
}

// Naive attention over a whole sequence: scores matrix, causal mask, GQA head mapping.
TEST(ops, attention_with_gqa_and_causal_mask) {
  const int T = 9, Hq = 4, Hkv = 2, D = 32;
  auto q = random_floats(T * Hq * D, 8, -1, 1);
  auto k = random_floats(T * Hkv * D, 9, -1, 1);
  auto v = random_floats(T * Hkv * D, 10, -1, 1);
  const float scale = 1 / std::sqrt(float(D));
  for (ggml_type kt : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0}) {
    const uint64_t rb = *row_bytes(kt, D);
    std::vector<uint8_t> kq(rb * T * Hkv), vq(rb * T * Hkv);
    for (int r = 0; r < T * Hkv; ++r) {
      quantize_row(kt, k.data() + r * D, kq.data() + r * rb, D);
      quantize_row(kt, v.data() + r * D, vq.data() + r * rb, D);
    }
    std::vector<float> kd(k.size()), vd(v.size());
    for (int r = 0; r < T * Hkv; ++r) {
      dequantize_row(kt, kq.data() + r * rb, kd.data() + r * D, D);
      dequantize_row(kt, vq.data() + r * rb, vd.data() + r * D, D);
    }
    std::vector<float> got(T * Hq * D);
    std::vector<double> want(T * Hq * D);
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < Hq; ++h) {
        const int kvh = h / (Hq / Hkv);
        std::vector<const uint8_t*> kr, vr;
        for (int j = 0; j <= t; ++j) {
          kr.push_back(kq.data() + (j * Hkv + kvh) * rb);
          vr.push_back(vq.data() + (j * Hkv + kvh) * rb);
        }
        std::vector<float> scores(t + 1), tmp(D);
        attend_head(q.data() + (t * Hq + h) * D, kr.data(), vr.data(), kt, t + 1, D, scale,
                    scores.data(), tmp.data(), got.data() + (t * Hq + h) * D);
        // Full T×T score row with -inf above the diagonal, then softmax.
        std::vector<double> s(T);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < T; ++j) {
          double d = 0;
          for (int i = 0; i < D; ++i) d += double(q[(t * Hq + h) * D + i]) * kd[(j * Hkv + kvh) * D + i];
          s[j] = j <= t ? d * scale : -INFINITY;
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j < T; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int i = 0; i < D; ++i) {
          double o = 0;
          for (int j = 0; j < T; ++j) o += s[j] / sum * vd[(j * Hkv + kvh) * D + i];
          want[(t * Hq + h) * D + i] = o;
        }
      }
    }
    expect_close(got, want, 2e-5, std::string(type_name(kt)).c_str());
  }
}

}  // namespace
}  // namespace tandem
