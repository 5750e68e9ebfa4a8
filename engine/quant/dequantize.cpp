// Block formats -> float. Each function decodes whole blocks exactly as ggml does (same formulas,
// same operation order, no FMA contraction, so results are bit-identical to ggml's reference
// dequantizers on every CPU). The loops decode in 32-bit lanes like vec_dot.cpp.
#include <cassert>
#include <cstring>

#include "quant/half.h"
#include "quant/quant.h"
#include "quant/quant_impl.h"

namespace tandem {
namespace {

using quant_detail::byte_bits;
using quant_detail::k4_scale_min;
using quant_detail::load8;
using quant_detail::load_u32;
using quant_detail::scale_to_f32;
using quant_detail::signed_byte;
using quant_detail::words8;

TANDEM_QUANT_MULTIVERSION
void dequant_f16(const uint16_t* TANDEM_RESTRICT x, float* TANDEM_RESTRICT y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32_portable(x[i]);
}

TANDEM_QUANT_MULTIVERSION
void dequant_bf16(const uint16_t* TANDEM_RESTRICT x, float* TANDEM_RESTRICT y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}

inline float to_f(int v) { return static_cast<float>(v); }

// Q4_0 / Q4_1 / Q5_0 / Q5_1: byte j of qs holds value j (low nibble) and j+16 (high nibble); a Q5
// value's 5th bit is bit j of qh (little-endian u32; Q4's qh = 0 folds away). The _0 types give
// y = (q - 8)*d or (q - 16)*d, the _1 types y = q*d + m.
template <class Block>
TANDEM_QUANT_MULTIVERSION void dequant_small(const Block* TANDEM_RESTRICT x, float* TANDEM_RESTRICT y, int64_t nb) {
  constexpr bool five_bit = requires(const Block& b) { b.qh; };
  constexpr bool stored_min = requires(const Block& b) { b.m; };
  constexpr int zero = five_bit ? 16 : 8;
  for (int64_t i = 0; i < nb; ++i, y += qk_small) {
    const float d = scale_to_f32(x[i].d);
    float m = 0.0f;
    if constexpr (stored_min) m = scale_to_f32(x[i].m);
    uint32_t qh = 0;
    if constexpr (five_bit) qh = load_u32(x[i].qh);
    for (int g = 0; g < 2; ++g) {
      const words8 w = load8(x[i].qs + 8 * g);
      TANDEM_SIMD
      for (int l = 0; l < 8; ++l) {
        const int j = 8 * g + l;
        const int lo = static_cast<int>((byte_bits(w, l, 0) & 0xF) | (((qh >> j) & 1) << 4));
        const int hi = static_cast<int>((byte_bits(w, l, 4) & 0xF) | (((qh >> (j + 16)) & 1) << 4));
        if constexpr (stored_min) {
          y[j] = to_f(lo) * d + m;
          y[16 + j] = to_f(hi) * d + m;
        } else {
          y[j] = to_f(lo - zero) * d;
          y[16 + j] = to_f(hi - zero) * d;
        }
      }
    }
  }
}

TANDEM_QUANT_MULTIVERSION
void dequant_q8_0(const block_q8_0* TANDEM_RESTRICT x, float* TANDEM_RESTRICT y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += qk_small) {
    const float d = scale_to_f32(x[i].d);
    const auto* q = reinterpret_cast<const uint8_t*>(x[i].qs);
    for (int g = 0; g < 4; ++g) {
      const words8 w = load8(q + 8 * g);
      TANDEM_SIMD
      for (int l = 0; l < 8; ++l) y[8 * g + l] = to_f(signed_byte(w, l)) * d;
    }
  }
}

// Q4_K: four 64-value chunks; chunk c uses qs[32c..32c+31], low nibbles for the first 32 values
// (sub-block 2c), high nibbles for the next 32 (sub-block 2c+1). y = (d*sc)*q - dmin*m.
// Q5_K adds 16 when bit 2c (first 32) / 2c+1 (next 32) of qh[l] is set.
template <bool five_bit>
inline void dequant_k4_like(const uint8_t* scales, float d, float dmin, const uint8_t* qs, const uint8_t* qh,
                            float* TANDEM_RESTRICT y) {
  for (int c = 0; c < 4; ++c, qs += 32, y += 64) {
    uint8_t sc, m;
    k4_scale_min(2 * c, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    k4_scale_min(2 * c + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int g = 0; g < 4; ++g) {
      const words8 w = load8(qs + 8 * g);
      const words8 h = five_bit ? load8(qh + 8 * g) : words8{0, 0};
      TANDEM_SIMD
      for (int l = 0; l < 8; ++l) {
        const int j = 8 * g + l;
        const int lo = static_cast<int>((byte_bits(w, l, 0) & 0xF) | ((byte_bits(h, l, 2 * c) & 1) << 4));
        const int hi = static_cast<int>((byte_bits(w, l, 4) & 0xF) | ((byte_bits(h, l, 2 * c + 1) & 1) << 4));
        y[j] = d1 * to_f(lo) - m1;
        y[32 + j] = d2 * to_f(hi) - m2;
      }
    }
  }
}

TANDEM_QUANT_MULTIVERSION
void dequant_q4_k(const block_q4_k* TANDEM_RESTRICT x, float* TANDEM_RESTRICT y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += qk_k) {
    dequant_k4_like<false>(x[i].scales, scale_to_f32(x[i].d), scale_to_f32(x[i].dmin), x[i].qs, nullptr, y);
  }
}

TANDEM_QUANT_MULTIVERSION
void dequant_q5_k(const block_q5_k* TANDEM_RESTRICT x, float* TANDEM_RESTRICT y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += qk_k) {
    dequant_k4_like<true>(x[i].scales, scale_to_f32(x[i].d), scale_to_f32(x[i].dmin), x[i].qs, x[i].qh, y);
  }
}

// Q6_K: two 128-value halves; in each, value l (0..31) of the four 32-runs takes its low 4 bits
// from ql[l] / ql[l+32] (low, low, high, high nibble) and its top 2 bits from qh[l] bits 0-1, 2-3,
// 4-5, 6-7. (d*scale of its 16-value sub-block) * (q - 32).
TANDEM_QUANT_MULTIVERSION
void dequant_q6_k(const block_q6_k* TANDEM_RESTRICT x, float* TANDEM_RESTRICT y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = scale_to_f32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int g = 0; g < 4; ++g) {
        const int is = g / 2;
        const float c1 = d * to_f(sc[is]), c2 = d * to_f(sc[is + 2]);
        const float c3 = d * to_f(sc[is + 4]), c4 = d * to_f(sc[is + 6]);
        const words8 a = load8(ql + 8 * g);
        const words8 b = load8(ql + 32 + 8 * g);
        const words8 hh = load8(qh + 8 * g);
        TANDEM_SIMD
        for (int l = 0; l < 8; ++l) {
          const int j = 8 * g + l;
          y[j] =
              c1 * to_f(static_cast<int>((byte_bits(a, l, 0) & 0xF) | ((byte_bits(hh, l, 0) & 3) << 4)) - 32);
          y[32 + j] =
              c2 * to_f(static_cast<int>((byte_bits(b, l, 0) & 0xF) | ((byte_bits(hh, l, 2) & 3) << 4)) - 32);
          y[64 + j] =
              c3 * to_f(static_cast<int>((byte_bits(a, l, 4) & 0xF) | ((byte_bits(hh, l, 4) & 3) << 4)) - 32);
          y[96 + j] =
              c4 * to_f(static_cast<int>((byte_bits(b, l, 4) & 0xF) | ((byte_bits(hh, l, 6) & 3) << 4)) - 32);
        }
      }
    }
  }
}

}  // namespace

bool can_dequantize(ggml_type t) {
  switch (t) {
    case ggml_type::f32:
    case ggml_type::f16:
    case ggml_type::bf16:
    case ggml_type::q4_0:
    case ggml_type::q4_1:
    case ggml_type::q5_0:
    case ggml_type::q5_1:
    case ggml_type::q8_0:
    case ggml_type::q4_k:
    case ggml_type::q5_k:
    case ggml_type::q6_k:
      return true;
    default:
      return false;
  }
}

void dequantize_row(ggml_type t, const void* src, float* dst, int64_t n) {
  assert(can_dequantize(t));
  assert(n % type_info(t).block_size == 0);
  switch (t) {
    case ggml_type::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case ggml_type::f16:
      return dequant_f16(static_cast<const uint16_t*>(src), dst, n);
    case ggml_type::bf16:
      return dequant_bf16(static_cast<const uint16_t*>(src), dst, n);
    case ggml_type::q4_0:
      return dequant_small(static_cast<const block_q4_0*>(src), dst, n / qk_small);
    case ggml_type::q4_1:
      return dequant_small(static_cast<const block_q4_1*>(src), dst, n / qk_small);
    case ggml_type::q5_0:
      return dequant_small(static_cast<const block_q5_0*>(src), dst, n / qk_small);
    case ggml_type::q5_1:
      return dequant_small(static_cast<const block_q5_1*>(src), dst, n / qk_small);
    case ggml_type::q8_0:
      return dequant_q8_0(static_cast<const block_q8_0*>(src), dst, n / qk_small);
    case ggml_type::q4_k:
      return dequant_q4_k(static_cast<const block_q4_k*>(src), dst, n / qk_k);
    case ggml_type::q5_k:
      return dequant_q5_k(static_cast<const block_q5_k*>(src), dst, n / qk_k);
    case ggml_type::q6_k:
      return dequant_q6_k(static_cast<const block_q6_k*>(src), dst, n / qk_k);
    default:
      assert(false && "dequantize_row: unsupported type");
      return;
  }
}

}  // namespace tandem
