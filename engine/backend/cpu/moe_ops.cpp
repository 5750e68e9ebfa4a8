// MoE routing and expert FFNs on the CPU: softmax → top-k (ties to the lower id) → optional
// renormalisation, then each selected expert's SwiGLU over the tokens that chose it.
#include "backend/cpu/moe_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backend/cpu/thread_pool.h"

namespace tandem {
namespace {

// NaN sorts as -inf so that the order stays strict-weak whatever the logits hold.
float sort_key(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

float sigmoid(float v) { return 1.f / (1.f + std::exp(-v)); }

// x (T rows) through one SwiGLU FFN: ys = down(silu(gate x) * up x); gate/up scratch of T·n_ff.
void swiglu_ffn(thread_pool& pool, const weight_view& gate, const weight_view& up, const weight_view& down,
                const float* x, int64_t T, int64_t n_ff, std::vector<float>& g, std::vector<float>& u, float* ys) {
  g.resize(T * n_ff);
  u.resize(T * n_ff);
  matmul(pool, gate, x, T, g.data());
  matmul(pool, up, x, T, u.data());
  swiglu(g.data(), u.data(), g.data(), T * n_ff);
  matmul(pool, down, g.data(), T, ys);
}

// The shared expert of every token added to out, each row scaled by its sigmoid gate.
void add_shared_expert(thread_pool& pool, const moe_weights& w, const float* x, int64_t T, int64_t E, float* out,
                       moe_scratch& s) {
  s.ys.resize(T * E);
  swiglu_ffn(pool, w.gate_shexp, w.up_shexp, w.down_shexp, x, T, w.n_ff_shexp, s.gate, s.up, s.ys.data());
  for (int64_t t = 0; t < T; ++t) {
    float dot = 0.f;
    for (int64_t i = 0; i < E; ++i) dot += w.shexp_gate[i] * x[t * E + i];
    const float g = sigmoid(dot);
    for (int64_t i = 0; i < E; ++i) out[t * E + i] += g * s.ys[t * E + i];
  }
}

}  // namespace

void moe_route(const float* logits, int64_t n_tok, int n_expert, int k, bool renorm, int32_t* ids_out,
               float* weights_out) {
  std::vector<int32_t> order(n_expert);
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* l = logits + t * n_expert;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [l](int32_t a, int32_t b) {
      const float ka = sort_key(l[a]), kb = sort_key(l[b]);
      return ka > kb || (ka == kb && a < b);
    });
    // Softmax over all experts in float32, as transformers computes it (dtype=torch.float).
    float mx = -std::numeric_limits<float>::infinity();
    for (int e = 0; e < n_expert; ++e) mx = std::max(mx, sort_key(l[e]));
    float sum = 0.f;
    for (int e = 0; e < n_expert; ++e) sum += std::exp(sort_key(l[e]) - mx);
    float sel = 0.f;
    for (int j = 0; j < k; ++j) {
      const int32_t e = order[j];
      ids_out[t * k + j] = e;
      weights_out[t * k + j] = std::exp(sort_key(l[e]) - mx) / sum;
      sel += weights_out[t * k + j];
    }
    if (renorm)
      for (int j = 0; j < k; ++j) weights_out[t * k + j] /= sel;
  }
}

weight_view expert_view(const weight_view& stacked, int64_t n_out, int expert) {
  weight_view v = stacked;
  v.n_out = n_out;
  v.data = stacked.row(int64_t(expert) * n_out);
  return v;
}

void moe_ffn(thread_pool& pool, const moe_weights& w, const float* x, int64_t T, int64_t E, float* out,
             moe_scratch& s) {
  const int k = w.n_used;
  s.logits.resize(T * w.n_expert);
  s.ids.resize(T * k);
  s.weights.resize(T * k);
  matmul(pool, w.router, x, T, s.logits.data());
  moe_route(s.logits.data(), T, w.n_expert, k, w.renorm, s.ids.data(), s.weights.data());
  std::fill_n(out, T * E, 0.f);
  // Each expert once, over the rows that chose it, in token order (so the sum per token is in
  // expert-id order, whatever the batch).
  std::vector<int64_t> rows;
  for (int e = 0; e < w.n_expert; ++e) {
    rows.clear();
    for (int64_t i = 0; i < T * k; ++i)
      if (s.ids[i] == e) rows.push_back(i);
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    s.xs.resize(n * E);
    for (int64_t r = 0; r < n; ++r) std::copy_n(x + (rows[r] / k) * E, E, s.xs.data() + r * E);
    s.ys.resize(n * E);
    swiglu_ffn(pool, expert_view(w.gate_exps, w.n_ff_exp, e), expert_view(w.up_exps, w.n_ff_exp, e),
               expert_view(w.down_exps, E, e), s.xs.data(), n, w.n_ff_exp, s.gate, s.up, s.ys.data());
    for (int64_t r = 0; r < n; ++r) {
      const float wt = s.weights[rows[r]];
      float* o = out + (rows[r] / k) * E;
      for (int64_t i = 0; i < E; ++i) o[i] += wt * s.ys[r * E + i];
    }
  }
  if (w.n_ff_shexp > 0) add_shared_expert(pool, w, x, T, E, out, s);
}

}  // namespace tandem
