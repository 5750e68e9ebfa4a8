// CPU reference operations: float32 accumulation, no SIMD intrinsics, quantized rows via vec_dot.
#include "backend/cpu/ops.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/thread_pool.h"
#include "quant/quant.h"

namespace tandem {

weight_view make_weight_view(const gguf_tensor& t) {
  weight_view w;
  w.type = t.type;
  w.data = t.data;
  w.n_in = static_cast<int64_t>(t.dims[0]);
  w.n_out = static_cast<int64_t>(t.n_elements / t.dims[0]);
  w.row_bytes = row_bytes(t.type, t.dims[0]).value_or(0);
  return w;
}

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  float ss = 0.f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

namespace {

// The angle in double: positions reach 1e5 and float would lose the low bits of pos * freq.
void rotation(int32_t pos, int i, int rope_dim, float theta, float& c, float& s) {
  const double freq = std::pow(static_cast<double>(theta), -2.0 * i / rope_dim);
  const double angle = pos * freq;
  c = static_cast<float>(std::cos(angle));
  s = static_cast<float>(std::sin(angle));
}

}  // namespace

void rope_rotations(int32_t pos, int rope_dim, float theta, float* cos_sin) {
  for (int i = 0; i < rope_dim / 2; ++i) rotation(pos, i, rope_dim, theta, cos_sin[2 * i], cos_sin[2 * i + 1]);
}

void rope(float* x, int n_heads, int head_dim, int rope_dim, int32_t pos, float theta,
          rope_style style) {
  const int half = rope_dim / 2;
  for (int i = 0; i < half; ++i) {
    float c = 0.f, s = 0.f;
    rotation(pos, i, rope_dim, theta, c, s);
    const int a = style == rope_style::normal ? 2 * i : i;
    const int b = style == rope_style::normal ? 2 * i + 1 : i + half;
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.f + std::exp(-gate[i])) * up[i];
}

void matmul(thread_pool& pool, const weight_view& w, const float* x, int64_t n_tokens, float* y) {
  // Each weight row is read once and applied to every token while it sits in cache.
  const size_t grain = std::max<size_t>(1, static_cast<size_t>(w.n_out) / (pool.size() * 8));
  pool.parallel_for(static_cast<size_t>(w.n_out), grain, [&](size_t begin, size_t end) {
    for (size_t o = begin; o < end; ++o) {
      const uint8_t* row = w.row(static_cast<int64_t>(o));
      for (int64_t t = 0; t < n_tokens; ++t)
        y[t * w.n_out + static_cast<int64_t>(o)] = vec_dot(w.type, row, x + t * w.n_in, w.n_in);
    }
  });
}

void attend_head(const float* q, const uint8_t* const* k_rows, const uint8_t* const* v_rows,
                 ggml_type kv_type, int64_t n_kv, int head_dim, float scale, float* scores,
                 float* tmp, float* out) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n_kv; ++j) {
    scores[j] = scale * vec_dot(kv_type, k_rows[j], q, head_dim);
    mx = std::max(mx, scores[j]);
  }
  float sum = 0.f;
  for (int64_t j = 0; j < n_kv; ++j) {
    scores[j] = std::exp(scores[j] - mx);
    sum += scores[j];
  }
  std::fill(out, out + head_dim, 0.f);
  for (int64_t j = 0; j < n_kv; ++j) {
    dequantize_row(kv_type, v_rows[j], tmp, head_dim);
    const float p = scores[j] / sum;
    for (int d = 0; d < head_dim; ++d) out[d] += p * tmp[d];
  }
}

}  // namespace tandem
