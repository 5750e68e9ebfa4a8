// The operations of the CPU forward pass, each plain and float32-accumulating, so that unit tests
// can hold them against naive formulas and CUDA kernels can be held against them.
#pragma once

#include <cstdint>

#include "gguf/gguf_reader.h"
#include "model/arch_spec.h"
#include "quant/ggml_type.h"

namespace tandem {

class thread_pool;

// A weight matrix stored {n_in, n_out}: n_out rows of n_in elements of `type`.
struct weight_view {
  ggml_type type = ggml_type::f32;
  const uint8_t* data = nullptr;
  int64_t n_in = 0;
  int64_t n_out = 0;
  uint64_t row_bytes = 0;
  const uint8_t* row(int64_t o) const { return data + static_cast<uint64_t>(o) * row_bytes; }
};
weight_view make_weight_view(const gguf_tensor& t);

// out = x / sqrt(mean(x^2) + eps) * w
void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps);

// Rotates the first rope_dim dims of each of n_heads vectors (head_dim apart) by position pos.
// normal: pairs (2i, 2i+1); neox: pairs (i, i + rope_dim/2); angle = pos * theta^(-2i/rope_dim).
void rope(float* x, int n_heads, int head_dim, int rope_dim, int32_t pos, float theta,
          rope_style style);

// The rotations rope applies at position pos: cos_sin[2i], cos_sin[2i + 1] = cos, sin of pos *
// theta^(-2i/rope_dim) for i < rope_dim / 2, computed in double as rope does (the GPU's decode
// step takes them from here rather than spend double-precision time on every layer).
void rope_rotations(int32_t pos, int rope_dim, float theta, float* cos_sin);

// out = silu(gate) * up
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// y[t][o] = sum_i W[o][i] * x[t][i] for t < n_tokens, straight from W's quantized rows;
// parallel over output rows.
void matmul(thread_pool& pool, const weight_view& w, const float* x, int64_t n_tokens, float* y);

// One query head attending over n_kv cached rows (K and V rows of head_dim elements of kv_type):
// out = softmax(scale * q·K) · V. scores needs n_kv floats, tmp head_dim floats.
void attend_head(const float* q, const uint8_t* const* k_rows, const uint8_t* const* v_rows,
                 ggml_type kv_type, int64_t n_kv, int head_dim, float scale, float* scores,
                 float* tmp, float* out);

}  // namespace tandem
