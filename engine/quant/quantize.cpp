// float -> block formats: the 32-element formats and the float types here, the K-quants in
// quantize_k.cpp. Every quantizer fits the scale(s) of a block with a search
// (k_quant_search.cpp), stores them in their on-disk precision (fp16), and then rounds each
// value against the stored scale, so the levels are the best ones for what the decoder will see.
#include <cassert>
#include <cmath>
#include <cstring>

#include "quant/half.h"
#include "quant/k_quant_search.h"
#include "quant/quant.h"
#include "quant/quant_impl.h"

namespace tandem {
namespace quant_detail {
namespace {

// Symmetric fit of one 32-block with levels in [-nmax, nmax-1], rounded against the fp16 scale.
// Returns the fp16 scale; L gets the levels + nmax (0 .. 2 nmax - 1).
uint16_t fit_symmetric_block(const float* x, int nmax, bool search, uint8_t* L) {
  int8_t l[qk_small];
  float scale;
  if (search) {
    float w[qk_small];
    default_weights(qk_small, x, w);
    scale = search_symmetric_scale(qk_small, nmax, x, w, l);
  } else {
    scale = naive_symmetric_scale(qk_small, nmax, x, l);
  }
  const uint16_t d16 = fp32_to_fp16(scale);
  const float d = fp16_to_fp32(d16);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < qk_small; ++i) {
    L[i] = static_cast<uint8_t>(clamp_int(round_int(x[i] * id), -nmax, nmax - 1) + nmax);
  }
  return d16;
}

// Affine fit of one 32-block (y = d*q + m, q in [0, nmax]) rounded against the fp16 d and m.
void fit_affine_block(const float* x, int nmax, bool search, uint8_t* L, uint16_t& d16, uint16_t& m16) {
  affine_fit fit;
  if (search) {
    float w[qk_small];
    default_weights(qk_small, x, w);
    fit = search_affine_scale(qk_small, nmax, x, w, L, /*offset_nonpositive=*/false);
  } else {
    fit = naive_affine_scale(qk_small, nmax, x, L, false);
  }
  d16 = fp32_to_fp16(fit.scale);
  m16 = fp32_to_fp16(fit.offset);
  const float d = fp16_to_fp32(d16);
  const float m = fp16_to_fp32(m16);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < qk_small; ++i)
    L[i] = static_cast<uint8_t>(clamp_int(round_int((x[i] - m) * id), 0, nmax));
}

// Q8_0: levels -128..127 with the symmetric fit (the naive fit: d = -v/128 for the value v of
// largest magnitude, which then lands exactly on -128).
void quantize_q8_0(const float* x, block_q8_0* y, int64_t nb, bool search) {
  for (int64_t b = 0; b < nb; ++b, x += qk_small) {
    uint8_t L[qk_small];
    y[b].d = fit_symmetric_block(x, 128, search, L);
    for (int i = 0; i < qk_small; ++i) y[b].qs[i] = static_cast<int8_t>(L[i] - 128);
  }
}

void pack_nibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < qk_small / 2; ++j)
    qs[j] = static_cast<uint8_t>((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
}

// Bit 4 of level j goes to bit j of the little-endian u32 qh (j = 0..31).
void pack_high_bits(const uint8_t* L, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < qk_small; ++j) h |= static_cast<uint32_t>((L[j] >> 4) & 1) << j;
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(h >> (8 * k));
}

void quantize_q4_0(const float* x, block_q4_0* y, int64_t nb, bool search) {
  for (int64_t b = 0; b < nb; ++b, x += qk_small) {
    uint8_t L[qk_small];
    y[b].d = fit_symmetric_block(x, 8, search, L);
    pack_nibbles(L, y[b].qs);
  }
}

void quantize_q5_0(const float* x, block_q5_0* y, int64_t nb, bool search) {
  for (int64_t b = 0; b < nb; ++b, x += qk_small) {
    uint8_t L[qk_small];
    y[b].d = fit_symmetric_block(x, 16, search, L);
    pack_nibbles(L, y[b].qs);
    pack_high_bits(L, y[b].qh);
  }
}

void quantize_q4_1(const float* x, block_q4_1* y, int64_t nb, bool search) {
  for (int64_t b = 0; b < nb; ++b, x += qk_small) {
    uint8_t L[qk_small];
    fit_affine_block(x, 15, search, L, y[b].d, y[b].m);
    pack_nibbles(L, y[b].qs);
  }
}

void quantize_q5_1(const float* x, block_q5_1* y, int64_t nb, bool search) {
  for (int64_t b = 0; b < nb; ++b, x += qk_small) {
    uint8_t L[qk_small];
    fit_affine_block(x, 31, search, L, y[b].d, y[b].m);
    pack_nibbles(L, y[b].qs);
    pack_high_bits(L, y[b].qh);
  }
}

}  // namespace

void quantize_row_with(ggml_type t, const float* src, void* dst, int64_t n, bool search) {
  assert(can_quantize(t));
  assert(n % type_info(t).block_size == 0);
  switch (t) {
    case ggml_type::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case ggml_type::f16: {
      auto* y = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(src[i]);
      return;
    }
    case ggml_type::bf16: {
      auto* y = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(src[i]);
      return;
    }
    case ggml_type::q4_0:
      return quantize_q4_0(src, static_cast<block_q4_0*>(dst), n / qk_small, search);
    case ggml_type::q4_1:
      return quantize_q4_1(src, static_cast<block_q4_1*>(dst), n / qk_small, search);
    case ggml_type::q5_0:
      return quantize_q5_0(src, static_cast<block_q5_0*>(dst), n / qk_small, search);
    case ggml_type::q5_1:
      return quantize_q5_1(src, static_cast<block_q5_1*>(dst), n / qk_small, search);
    case ggml_type::q8_0:
      return quantize_q8_0(src, static_cast<block_q8_0*>(dst), n / qk_small, search);
    case ggml_type::q4_k:
      return quantize_row_q4_k(src, static_cast<block_q4_k*>(dst), n, search);
    case ggml_type::q5_k:
      return quantize_row_q5_k(src, static_cast<block_q5_k*>(dst), n, search);
    case ggml_type::q6_k:
      return quantize_row_q6_k(src, static_cast<block_q6_k*>(dst), n, search);
    default:
      assert(false && "quantize_row: unsupported type");
      return;
  }
}

}  // namespace quant_detail

bool can_quantize(ggml_type t) { return can_dequantize(t); }

void quantize_row(ggml_type t, const float* src, void* dst, int64_t n) {
  quant_detail::quantize_row_with(t, src, dst, n, /*search=*/true);
}

void quantize_kv_row(ggml_type t, const float* src, void* dst, int64_t n) {
  quant_detail::quantize_row_with(t, src, dst, n, /*search=*/false);
}

}  // namespace tandem
