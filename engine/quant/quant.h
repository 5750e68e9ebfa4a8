// Row-level conversions between float and the ggml block types, and the dot product the
// CPU backend computes with (quantized row · float vector), without dequantizing the model.
#pragma once

#include <cstdint>

#include "quant/ggml_type.h"

namespace tandem {

bool can_dequantize(ggml_type t);  // F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K
bool can_quantize(ggml_type t);    // F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K

// n must be a multiple of the type's block size (callers validate; a violation is a bug).
// dequantize_row gives the same floats as ggml's dequantize_row_* (bit for bit, on every CPU).
// quantize_row fits each block's scales with a weighted least-squares search (k_quant_search.h);
// its output is in the exact ggml layout, and a given build produces the same bytes on every CPU.
// Rows need only the alignment of their block's fields (2 bytes for the quant types).
void dequantize_row(ggml_type t, const void* src, float* dst, int64_t n);
void quantize_row(ggml_type t, const float* src, void* dst, int64_t n);

// What the KV cache stores: quantize_row without the search, each block's scale taken from its
// value of largest magnitude (one pass, as llama.cpp quantizes its cache). Keys and values are
// written every token, where the search's accuracy gain is small and its 40 trial scales per
// block were most of a q8_0 cache's decode cost on the GPU; the GPU writes these same bytes
// (kernels/q8_fit.cuh).
void quantize_kv_row(ggml_type t, const float* src, void* dst, int64_t n);

// sum_i row[i] * x[i] over n elements, accumulated in float32 (lane-wise partial sums, so it
// differs from dot(dequantize_row(row), x) by rounding only). Allocates nothing.
float vec_dot(ggml_type t, const void* row, const float* x, int64_t n);

}  // namespace tandem
