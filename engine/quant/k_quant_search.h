// Scale searches used by the quantizers (internal to quant/, exposed for tests).
//
// Both minimise a weighted squared error sum_i w_i (x_i - xhat_i)^2 over a small group of values.
// They try a fan of candidate scales around the obvious one (range / levels), round the values for
// each candidate, solve the weighted least-squares problem for the best scale (and offset) given
// those integer levels, and keep the best; then they polish the winner with a few rounds of
// re-rounding and re-solving (alternating minimisation). This is the same kind of search as
// llama.cpp's make_qx_quants (symmetric) and make_qkx2_quants (scale + min); written afresh.
#pragma once

#include <cstdint>

#include "quant/blocks.h"
#include "quant/ggml_type.h"

namespace tandem::quant_detail {

// Symmetric: x_i ~ scale * L_i with integer L_i in [-nmax, nmax-1] (the asymmetric signed range of
// Q4_0 / Q5_0 / Q6_K). The scale may be negative: the candidates map the value of largest magnitude
// to -nmax, the level with the larger range. Returns the scale; an all-zero group gives 0 and L = 0.
float search_symmetric_scale(int n, int nmax, const float* x, const float* w, int8_t* L, int steps_down = 30,
                             int steps_up = 9);

// Affine: x_i ~ scale * L_i + offset, L_i in [0, nmax], scale >= 0. With offset_nonpositive the
// offset is constrained to <= 0 (K-quants store a non-negative min that is subtracted).
struct affine_fit {
  float scale;
  float offset;
};
affine_fit search_affine_scale(int n, int nmax, const float* x, const float* w, uint8_t* L,
                               bool offset_nonpositive, float rmin = -1.0f, float rdelta = 0.1f,
                               int nsteps = 20);

// The naive fits the searches improve on (used as a baseline by tests and by search=false):
// symmetric: scale = max / -nmax (sign of the largest-magnitude value); affine: scale =
// (max - min) / nmax, offset = min.
float naive_symmetric_scale(int n, int nmax, const float* x, int8_t* L);
affine_fit naive_affine_scale(int n, int nmax, const float* x, uint8_t* L, bool offset_nonpositive);

// Default per-value weights: rms(x) + |x_i| (leans towards the large values without ignoring the
// small ones).
void default_weights(int n, const float* x, float* w);

// quantize_row with a choice: search=true is what quantize_row does; search=false uses the naive
// scales throughout (a baseline for tests). Types as can_quantize.
void quantize_row_with(ggml_type t, const float* x, void* y, int64_t n, bool search);

// The K-quant row quantizers (quantize_k.cpp).
void quantize_row_q4_k(const float* x, block_q4_k* y, int64_t n, bool search);
void quantize_row_q5_k(const float* x, block_q5_k* y, int64_t n, bool search);
void quantize_row_q6_k(const float* x, block_q6_k* y, int64_t n, bool search);

}  // namespace tandem::quant_detail
