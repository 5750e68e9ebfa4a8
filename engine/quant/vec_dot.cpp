// Quantized row . float vector, block by block, without dequantizing the row into memory.
//
// Each kernel decodes a block's integer levels in registers (see "decoding in 32-bit lanes") and
// multiplies them with x in float into fixed arrays of `lanes` independent accumulators, applying
// the block's (sub-)scales on the way.
// Writing the sums lane-wise (acc[l] += ...) instead of into one scalar is what lets the compiler
// vectorize without -ffast-math: no reassociation is needed, each lane is its own sum. The lanes
// are added up at the end, so results differ from a sequential float sum only by rounding.
//
// The kernels are compiled for x86-64-v4 / v3 / baseline and picked at load time (see
// TANDEM_QUANT_MULTIVERSION); this file is built with FMA contraction allowed.
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
using quant_detail::scale_to_f32;
using quant_detail::signed_byte;
using quant_detail::words8;

constexpr int lanes = 32;

inline float sum_lanes(const float* acc) {
  float s = 0.0f;
  for (int l = 0; l < lanes; ++l) s += acc[l];
  return s;
}

inline float to_f(int v) { return static_cast<float>(v); }

inline float f32_to_f32(float v) { return v; }

// F32 / F16 / BF16 rows: element i is to_f32(w[i]).
template <class T, float (*to_f32)(T)>
TANDEM_QUANT_MULTIVERSION float dot_plain(const T* TANDEM_RESTRICT w, const float* TANDEM_RESTRICT x, int64_t n) {
  float acc[lanes] = {};
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    TANDEM_SIMD
    for (int l = 0; l < lanes; ++l) acc[l] += to_f32(w[i + l]) * x[i + l];
  }
  float s = sum_lanes(acc);
  for (; i < n; ++i) s += to_f32(w[i]) * x[i];
  return s;
}

// Blocks are decoded in 32-bit lanes (words8, byte_bits, signed_byte in quant_impl.h).

TANDEM_QUANT_MULTIVERSION
float dot_q8_0(const block_q8_0* TANDEM_RESTRICT b, const float* TANDEM_RESTRICT x, int64_t nb) {
  float acc[lanes] = {};
  for (int64_t i = 0; i < nb; ++i, x += qk_small) {
    const float d = scale_to_f32(b[i].d);
    const auto* q = reinterpret_cast<const uint8_t*>(b[i].qs);
    for (int g = 0; g < 4; ++g) {
      const words8 w = load8(q + 8 * g);
      TANDEM_SIMD
      for (int l = 0; l < 8; ++l) {
        acc[8 * g + l] += d * (to_f(signed_byte(w, l)) * x[8 * g + l]);
      }
    }
  }
  return sum_lanes(acc);
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: byte j of qs holds value j (low nibble) and j+16 (high nibble); a Q5
// value's 5th bit is bit j of the little-endian u32 qh (Q4's qh = 0 folds away). y = d*q + m, one
// FMA: the _1 types store m, the _0 ones have y = d*(q-8) or d*(q-16).
template <class Block>
TANDEM_QUANT_MULTIVERSION float dot_small(const Block* TANDEM_RESTRICT b, const float* TANDEM_RESTRICT x,
                                          int64_t nb) {
  constexpr bool five_bit = requires(const Block& blk) { blk.qh; };
  constexpr bool stored_min = requires(const Block& blk) { blk.m; };
  float acc[lanes] = {};
  for (int64_t i = 0; i < nb; ++i, x += qk_small) {
    const float d = scale_to_f32(b[i].d);
    float m;
    if constexpr (stored_min) m = scale_to_f32(b[i].m);
    else m = (five_bit ? -16.0f : -8.0f) * d;
    uint32_t qh = 0;
    if constexpr (five_bit) qh = quant_detail::load_u32(b[i].qh);
    for (int g = 0; g < 2; ++g) {
      const words8 w = load8(b[i].qs + 8 * g);
      TANDEM_SIMD
      for (int l = 0; l < 8; ++l) {
        const int j = 8 * g + l;
        const int lo = static_cast<int>((byte_bits(w, l, 0) & 0xF) | (((qh >> j) & 1) << 4));
        const int hi = static_cast<int>((byte_bits(w, l, 4) & 0xF) | (((qh >> (j + 16)) & 1) << 4));
        acc[j] += (d * to_f(lo) + m) * x[j];
        acc[16 + j] += (d * to_f(hi) + m) * x[16 + j];
      }
    }
  }
  return sum_lanes(acc);
}

// Q4_K / Q5_K: sub-block s (32 values) has y = (d*sc_s) * q - (dmin*m_s). The 12 scale bytes
// are unpacked four at a time with 32-bit masks (the layout of k4_scale_min, word-wise): with
// A, B, C the three little-endian words, scales 0-3 = A & 63 per byte, mins 0-3 = B & 63,
// scales 4-7 = low nibbles of C | top 2 bits of A's bytes << 4, mins 4-7 = high nibbles of C |
// top 2 bits of B's bytes << 4.
inline void k4_sub_scales(const uint8_t* scales, float d, float dmin, float* ds, float* dm) {
  uint32_t a, b, c;
  std::memcpy(&a, scales, 4);
  std::memcpy(&b, scales + 4, 4);
  std::memcpy(&c, scales + 8, 4);
  const words8 sc{a & 0x3f3f3f3fu, (c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4)};
  const words8 mn{b & 0x3f3f3f3fu, ((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4)};
  TANDEM_SIMD
  for (int l = 0; l < 8; ++l) {
    ds[l] = d * to_f(static_cast<int>(byte_bits(sc, l, 0) & 0xff));
    dm[l] = dmin * to_f(static_cast<int>(byte_bits(mn, l, 0) & 0xff));
  }
}

// Chunk c (64 values) of a Q4_K / Q5_K super-block: byte l of the 32 at q holds value l (low
// nibble, sub-block 2c) and value 32+l (high nibble, sub-block 2c+1). Q5_K: the 5th bit of value l
// (low half) / 32+l (high half) of chunk c is bit 2c / 2c+1 of qh[l] (Q4_K's h = 0 folds away).
// (A second accumulator set for the high halves spills registers on AVX2 and is slower.)
template <class Block>
TANDEM_QUANT_MULTIVERSION float dot_k4_like(const Block* TANDEM_RESTRICT b, const float* TANDEM_RESTRICT x,
                                            int64_t nb) {
  constexpr bool five_bit = requires(const Block& blk) { blk.qh; };
  float acc[lanes] = {};
  for (int64_t i = 0; i < nb; ++i) {
    float ds[8], dm[8];
    k4_sub_scales(b[i].scales, scale_to_f32(b[i].d), scale_to_f32(b[i].dmin), ds, dm);
    const uint8_t* q = b[i].qs;
    for (int c = 0; c < 4; ++c, q += 32, x += 64) {
      const float d1 = ds[2 * c], m1 = dm[2 * c], d2 = ds[2 * c + 1], m2 = dm[2 * c + 1];
      for (int g = 0; g < 4; ++g) {
        const words8 w = load8(q + 8 * g);
        words8 h{0, 0};
        if constexpr (five_bit) h = load8(b[i].qh + 8 * g);
        TANDEM_SIMD
        for (int l = 0; l < 8; ++l) {
          const int j = 8 * g + l;
          const int lo = static_cast<int>((byte_bits(w, l, 0) & 0xF) | ((byte_bits(h, l, 2 * c) & 1) << 4));
          const int hi =
              static_cast<int>((byte_bits(w, l, 4) & 0xF) | ((byte_bits(h, l, 2 * c + 1) & 1) << 4));
          acc[j] += (d1 * to_f(lo) - m1) * x[j] + (d2 * to_f(hi) - m2) * x[32 + j];
        }
      }
    }
  }
  return sum_lanes(acc);
}

// Q6_K: per 128-value half, value l (0..31) of run k takes its low 4 bits from ql[l] (k = 0, 2:
// low / high nibble) or ql[l+32] (k = 1, 3) and its top 2 bits from bits 2k..2k+1 of qh[l]; the
// scale is scales[8h + 2k + l/16]. y = c*(q - 32) = c*q + (-32c) with c = d*scale.
TANDEM_QUANT_MULTIVERSION
float dot_q6_k(const block_q6_k* TANDEM_RESTRICT b, const float* TANDEM_RESTRICT x, int64_t nb) {
  float acc[lanes] = {};
  for (int64_t i = 0; i < nb; ++i) {
    const float d = scale_to_f32(b[i].d);
    float cs[16], co[16];
    for (int k = 0; k < 2; ++k) {
      const words8 w = load8(reinterpret_cast<const uint8_t*>(b[i].scales) + 8 * k);
      TANDEM_SIMD
      for (int l = 0; l < 8; ++l) {
        cs[8 * k + l] = d * to_f(signed_byte(w, l));
        co[8 * k + l] = -32.0f * cs[8 * k + l];
      }
    }
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, x += 128) {
      for (int g = 0; g < 4; ++g) {
        const int is = 8 * h + g / 2;  // values 0-15 and 16-31 of each run have their own scale
        const float c1 = cs[is], c2 = cs[is + 2], c3 = cs[is + 4], c4 = cs[is + 6];
        const float o1 = co[is], o2 = co[is + 2], o3 = co[is + 4], o4 = co[is + 6];
        const words8 a = load8(ql + 8 * g);
        const words8 bb = load8(ql + 32 + 8 * g);
        const words8 hh = load8(qh + 8 * g);
        TANDEM_SIMD
        for (int l = 0; l < 8; ++l) {
          const int j = 8 * g + l;
          const int q1 = static_cast<int>((byte_bits(a, l, 0) & 0xF) | ((byte_bits(hh, l, 0) & 3) << 4));
          const int q2 = static_cast<int>((byte_bits(bb, l, 0) & 0xF) | ((byte_bits(hh, l, 2) & 3) << 4));
          const int q3 = static_cast<int>((byte_bits(a, l, 4) & 0xF) | ((byte_bits(hh, l, 4) & 3) << 4));
          const int q4 = static_cast<int>((byte_bits(bb, l, 4) & 0xF) | ((byte_bits(hh, l, 6) & 3) << 4));
          acc[j] += ((c1 * to_f(q1) + o1) * x[j] + (c2 * to_f(q2) + o2) * x[32 + j]) +
                    ((c3 * to_f(q3) + o3) * x[64 + j] + (c4 * to_f(q4) + o4) * x[96 + j]);
        }
      }
    }
  }
  return sum_lanes(acc);
}

}  // namespace

float vec_dot(ggml_type t, const void* row, const float* x, int64_t n) {
  assert(can_dequantize(t));
  assert(n % type_info(t).block_size == 0);
  switch (t) {
    case ggml_type::f32:
      return dot_plain<float, f32_to_f32>(static_cast<const float*>(row), x, n);
    case ggml_type::f16:
      return dot_plain<uint16_t, fp16_to_fp32_portable>(static_cast<const uint16_t*>(row), x, n);
    case ggml_type::bf16:
      return dot_plain<uint16_t, bf16_to_fp32>(static_cast<const uint16_t*>(row), x, n);
    case ggml_type::q4_0:
      return dot_small(static_cast<const block_q4_0*>(row), x, n / qk_small);
    case ggml_type::q4_1:
      return dot_small(static_cast<const block_q4_1*>(row), x, n / qk_small);
    case ggml_type::q5_0:
      return dot_small(static_cast<const block_q5_0*>(row), x, n / qk_small);
    case ggml_type::q5_1:
      return dot_small(static_cast<const block_q5_1*>(row), x, n / qk_small);
    case ggml_type::q8_0:
      return dot_q8_0(static_cast<const block_q8_0*>(row), x, n / qk_small);
    case ggml_type::q4_k:
      return dot_k4_like(static_cast<const block_q4_k*>(row), x, n / qk_k);
    case ggml_type::q5_k:
      return dot_k4_like(static_cast<const block_q5_k*>(row), x, n / qk_k);
    case ggml_type::q6_k:
      return dot_q6_k(static_cast<const block_q6_k*>(row), x, n / qk_k);
    default:
      assert(false && "vec_dot: unsupported type");
      return 0.0f;
  }
}

}  // namespace tandem
