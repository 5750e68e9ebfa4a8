// The CPU backend on tiny random models: a naive whole-model forward in double as reference,
// KV cache consistency (incremental decode == one batched pass), multi-sequence batches, errors.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "quant/quant.h"
#include "tiny_model.h"

namespace tandem {
namespace {

using dvec = std::vector<double>;

dvec load(const gguf_tensor* t) {
  std::vector<float> f(t->n_elements);
  dequantize_row(t->type, t->data, f.data(), int64_t(t->n_elements));
  return dvec(f.begin(), f.end());
}

// y = W x with W stored {n_in, n_out}.
dvec mv(const dvec& w, const dvec& x) {
  const size_t n_in = x.size(), n_out = w.size() / n_in;
  dvec y(n_out, 0.0);
  for (size_t o = 0; o < n_out; ++o)
    for (size_t i = 0; i < n_in; ++i) y[o] += w[o * n_in + i] * x[i];
  return y;
}

void rmsn(double* x, const dvec& w, size_t n, double eps) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = 1 / std::sqrt(ss / double(n) + eps);
  for (size_t i = 0; i < n; ++i) x[i] = x[i] * inv * w[i];
}

void rope_d(double* v, int D, int R, int pos, double theta, bool neox) {
  for (int i = 0; i < R / 2; ++i) {
    const double a = pos / std::pow(theta, 2.0 * i / R), c = std::cos(a), s = std::sin(a);
    const int j = neox ? i : 2 * i, k = neox ? i + R / 2 : 2 * i + 1;
    const double x0 = v[j], x1 = v[k];
    v[j] = x0 * c - x1 * s;
    v[k] = x0 * s + x1 * c;
  }
  (void)D;
}

// Straightforward transformer forward over the whole sequence; returns logits per position.
std::vector<dvec> naive_forward(const model_desc& d, const std::vector<int32_t>& toks) {
  const auto& hp = d.hp;
  const size_t T = toks.size(), E = hp.n_embd, D = hp.head_dim;
  const size_t Hq = hp.n_head, Hk = hp.n_head_kv;
  const bool neox = d.arch->flags.rope == rope_style::neox;
  dvec emb = load(d.token_embd);
  std::vector<dvec> x(T);
  for (size_t t = 0; t < T; ++t) x[t] = dvec(emb.begin() + toks[t] * E, emb.begin() + (toks[t] + 1) * E);
  for (const auto& L : d.layers) {
    dvec an = load(L.attn_norm), wq = load(L.wq), wk = load(L.wk), wv = load(L.wv), wo = load(L.wo);
    std::vector<dvec> q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      dvec h = x[t];
      rmsn(h.data(), an, E, hp.rms_eps);
      q[t] = mv(wq, h), k[t] = mv(wk, h), v[t] = mv(wv, h);
      if (L.bq) {
        dvec bq = load(L.bq), bk = load(L.bk), bv = load(L.bv);
        for (size_t i = 0; i < q[t].size(); ++i) q[t][i] += bq[i];
        for (size_t i = 0; i < k[t].size(); ++i) k[t][i] += bk[i], v[t][i] += bv[i];
      }
      for (size_t h2 = 0; h2 < Hq; ++h2) {
        if (L.q_norm) rmsn(q[t].data() + h2 * D, load(L.q_norm), D, hp.rms_eps);
        rope_d(q[t].data() + h2 * D, int(D), int(hp.rope_dim), int(t), hp.rope_theta, neox);
      }
      for (size_t h2 = 0; h2 < Hk; ++h2) {
        if (L.k_norm) rmsn(k[t].data() + h2 * D, load(L.k_norm), D, hp.rms_eps);
        rope_d(k[t].data() + h2 * D, int(D), int(hp.rope_dim), int(t), hp.rope_theta, neox);
      }
    }
    for (size_t t = 0; t < T; ++t) {
      dvec att(Hq * D, 0.0);
      for (size_t h2 = 0; h2 < Hq; ++h2) {
        const size_t kh = h2 / (Hq / Hk);
        dvec s(t + 1);
        double mx = -1e300, sum = 0;
        for (size_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (size_t i = 0; i < D; ++i) dot += q[t][h2 * D + i] * k[j][kh * D + i];
          mx = std::max(mx, s[j] = dot / std::sqrt(double(D)));
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j)
          for (size_t i = 0; i < D; ++i) att[h2 * D + i] += s[j] / sum * v[j][kh * D + i];
      }
      dvec o = mv(wo, att);
      for (size_t i = 0; i < E; ++i) x[t][i] += o[i];
      dvec h = x[t];
      rmsn(h.data(), load(L.ffn_norm), E, hp.rms_eps);
      dvec g = mv(load(L.ffn_gate), h), u = mv(load(L.ffn_up), h);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      dvec dn = mv(load(L.ffn_down), g);
      for (size_t i = 0; i < E; ++i) x[t][i] += dn[i];
    }
  }
  std::vector<dvec> logits(T);
  dvec on = load(d.output_norm), out = load(d.output);
  for (size_t t = 0; t < T; ++t) {
    rmsn(x[t].data(), on, E, hp.rms_eps);
    logits[t] = mv(out, x[t]);
  }
  return logits;
}

double max_rel_err(const float* got, const dvec& want) {
  double scale = 0, err = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(got[i] - want[i]));
  return err / scale;
}

struct fixture {
  std::unique_ptr<test::tiny_model> model;
  std::unique_ptr<backend> be;
  std::unique_ptr<kv_cache> cache;
};

fixture make(const std::string& arch, ggml_type wtype, ggml_type kv_type, uint32_t n_ctx = 64,
             uint32_t n_seq = 2) {
  fixture f;
  test::tiny_model_options opt;
  opt.arch = arch;
  opt.matrix_type = wtype;
  opt.hp.tied_output = arch == "qwen2";
  auto m = test::make_tiny_model(opt);
  EXPECT_TRUE(m.ok()) << m.message();
  f.model = std::move(m.value());
  auto be = make_cpu_backend(f.model->desc, {.n_threads = 3});
  EXPECT_TRUE(be.ok());
  f.be = std::move(be.value());
  kv_cache_config cfg;
  cfg.n_ctx = n_ctx;
  cfg.n_seq_max = n_seq;
  cfg.block_size = 4;
  cfg.type = kv_type;
  auto c = f.be->make_cache(cfg);
  EXPECT_TRUE(c.ok()) << c.message();
  f.cache = std::move(c.value());
  return f;
}

const std::vector<int32_t> k_tokens = {5, 17, 3, 88, 42, 42, 7, 63, 1, 95, 20};

class per_arch : public ::testing::TestWithParam<const char*> {};

TEST_P(per_arch, matches_naive_forward) {
  auto f = make(GetParam(), ggml_type::f32, ggml_type::f32);
  batch b;
  for (size_t i = 0; i < k_tokens.size(); ++i) b.add(k_tokens[i], 0, int32_t(i), true);
  std::vector<float> logits;
  ASSERT_TRUE(f.be->forward(b, *f.cache, logits).ok());
  auto want = naive_forward(f.model->desc, k_tokens);
  const size_t V = f.be->n_vocab();
  ASSERT_EQ(logits.size(), k_tokens.size() * V);
  for (size_t t = 0; t < k_tokens.size(); ++t)
    EXPECT_LT(max_rel_err(logits.data() + t * V, want[t]), 1e-5) << "position " << t;
}

TEST_P(per_arch, incremental_decode_equals_batched) {
  for (ggml_type kv : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0}) {
    auto f = make(GetParam(), ggml_type::q8_0, kv);
    const size_t V = f.be->n_vocab(), T = k_tokens.size();
    batch all;
    for (size_t i = 0; i < T; ++i) all.add(k_tokens[i], 0, int32_t(i), true);
    std::vector<float> batched, step;
    ASSERT_TRUE(f.be->forward(all, *f.cache, batched).ok());
    // Sequence 1: a 4-token prefill, then one token at a time.
    batch pre;
    for (size_t i = 0; i < 4; ++i) pre.add(k_tokens[i], 1, int32_t(i), i == 3);
    ASSERT_TRUE(f.be->forward(pre, *f.cache, step).ok());
    ASSERT_EQ(step.size(), V);
    EXPECT_LT(max_rel_err(step.data(), dvec(batched.begin() + 3 * V, batched.begin() + 4 * V)), 1e-5);
    for (size_t i = 4; i < T; ++i) {
      batch one;
      one.add(k_tokens[i], 1, int32_t(i), true);
      ASSERT_TRUE(f.be->forward(one, *f.cache, step).ok());
      EXPECT_LT(max_rel_err(step.data(), dvec(batched.begin() + i * V, batched.begin() + (i + 1) * V)), 1e-5)
          << type_name(kv) << " position " << i;
    }
  }
}

TEST_P(per_arch, two_sequences_in_one_batch) {
  auto f = make(GetParam(), ggml_type::f16, ggml_type::f16);
  const size_t V = f.be->n_vocab();
  std::vector<int32_t> a = {4, 9, 33, 60, 2}, c = {71, 8, 8, 15};
  std::vector<float> la, lc, mixed;
  batch ba, bc, bm;
  for (size_t i = 0; i < a.size(); ++i) ba.add(a[i], 0, int32_t(i), i + 1 == a.size());
  for (size_t i = 0; i < c.size(); ++i) bc.add(c[i], 1, int32_t(i), i + 1 == c.size());
  ASSERT_TRUE(f.be->forward(ba, *f.cache, la).ok());
  ASSERT_TRUE(f.be->forward(bc, *f.cache, lc).ok());
  f.cache->clear_all();
  // Interleaved tokens of both sequences.
  for (size_t i = 0; i < 5; ++i) {
    bm.add(a[i], 0, int32_t(i), i + 1 == a.size());
    if (i < c.size()) bm.add(c[i], 1, int32_t(i), i + 1 == c.size());
  }
  ASSERT_TRUE(f.be->forward(bm, *f.cache, mixed).ok());
  ASSERT_EQ(mixed.size(), 2 * V);
  EXPECT_LT(max_rel_err(mixed.data(), dvec(lc.begin(), lc.end())), 1e-6);  // c ends first
  EXPECT_LT(max_rel_err(mixed.data() + V, dvec(la.begin(), la.end())), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(archs, per_arch, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(cpu_backend, context_limit_is_a_clear_error) {
  auto f = make("qwen3", ggml_type::f32, ggml_type::f16, /*n_ctx=*/8, 1);
  std::vector<float> logits;
  batch b;
  for (int i = 0; i < 9; ++i) b.add(1 + i, 0, i, i == 8);
  auto s = f.be->forward(b, *f.cache, logits);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("context limit reached"), std::string::npos) << s.message();
  EXPECT_EQ(f.cache->length(0), 0u);
  batch fill;
  for (int i = 0; i < 8; ++i) fill.add(1 + i, 0, i, i == 7);
  ASSERT_TRUE(f.be->forward(fill, *f.cache, logits).ok());
  batch more;
  more.add(3, 0, 8, true);
  EXPECT_FALSE(f.be->forward(more, *f.cache, logits).ok());
  EXPECT_EQ(f.cache->length(0), 8u);
}

TEST(cpu_backend, bad_token_and_foreign_cache_are_errors) {
  auto f = make("llama", ggml_type::f32, ggml_type::f32);
  std::vector<float> logits;
  batch b;
  b.add(int32_t(f.be->n_vocab()), 0, 0, true);
  auto s = f.be->forward(b, *f.cache, logits);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos);
  auto q8 = make("llama", ggml_type::f32, ggml_type::q8_0);
  EXPECT_GT(q8.cache->bytes(), 0u);
  EXPECT_LT(q8.cache->bytes(), f.cache->bytes());
}

}  // namespace
}  // namespace tandem
