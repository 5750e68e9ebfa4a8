// Private helpers shared by the quant/ sources (not part of the API).
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/half.h"

// Hot loops are compiled several times for different x86-64 feature levels and picked at load
// time (GCC/Clang function multiversioning through an ifunc). The loops are plain C++ written so
// the compiler vectorizes them; the clones just let it use AVX2/FMA (v3) or AVX-512 (v4) without
// building the whole project for one CPU. Elsewhere the macro is empty.
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__CUDACC__) && !defined(TANDEM_QUANT_NO_MULTIVERSION)
#define TANDEM_QUANT_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TANDEM_QUANT_MULTIVERSION
#endif

// Marks a short fixed-length loop over lanes as a SIMD loop (iterations independent). With
// -fopenmp-simd (set by quant/CMakeLists.txt, which then defines TANDEM_QUANT_OMP_SIMD) GCC
// vectorizes such loops directly instead of first unrolling them completely and then doing a poor
// job with the straight-line code. Without the flag it is a no-op.
// TANDEM_SIMD_SUM(a, b) additionally lets the loop's float sums a, b be reassociated (split
// into vector lanes): used by the quantizers' searches, which are not multiversioned, so a given
// binary still quantizes identically on every CPU.
#if defined(TANDEM_QUANT_OMP_SIMD)
#define TANDEM_PRAGMA(x) _Pragma(#x)
#define TANDEM_SIMD TANDEM_PRAGMA(omp simd)
#define TANDEM_SIMD_SUM(...) TANDEM_PRAGMA(omp simd reduction(+ : __VA_ARGS__))
#else
#define TANDEM_SIMD
#define TANDEM_SIMD_SUM(...)
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TANDEM_RESTRICT __restrict__
#else
#define TANDEM_RESTRICT
#endif

namespace tandem::quant_detail {

// 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block, from the 12 packed bytes:
// j < 4: scale = s[j] & 63, min = s[j+4] & 63; j >= 4: the low 4 bits sit in s[j+4] (scale in the
// low nibble, min in the high one) and the top 2 bits in the spare top bits of s[j-4] / s[j].
inline void k4_scale_min(int j, const uint8_t* s, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Inverse of k4_scale_min for all 8 sub-blocks; sc[j], m[j] must be < 64.
inline void k4_pack_scales(const uint8_t* sc, const uint8_t* m, uint8_t* s) {
  std::memset(s, 0, k_scale_size);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = sc[j];
      s[j + 4] = m[j];
    } else {
      s[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
      s[j - 4] = static_cast<uint8_t>(s[j - 4] | ((sc[j] >> 4) << 6));
      s[j] = static_cast<uint8_t>(s[j] | ((m[j] >> 4) << 6));
    }
  }
}

// Round to the nearest integer, ties to even, for |v| < 2^22 (callers clamp the result to a small
// range, so larger inputs only need to give some int). Adding 1.5*2^23 leaves the integer in the
// low mantissa bits; this is much cheaper than lrintf without -fno-math-errno.
inline int round_int(float v) {
  const float t = v + 12582912.0f;
  uint32_t u;
  std::memcpy(&u, &t, sizeof u);
  return static_cast<int>(u & 0x007fffffu) - 0x00400000;
}

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// fp16 block scale -> float inside the multiversioned kernels. With _Float16 (GCC 12+ on x86-64)
// the conversion is one VCVTPH2PS in the AVX2 / AVX-512 clones instead of ~20 scalar integer
// instructions, which matters at one conversion per 32 values; the baseline clone calls libgcc.
// Exact either way.
inline float scale_to_f32(uint16_t h) {
#if defined(__FLT16_MAX__) && defined(__x86_64__) && !defined(__CUDACC__)
  _Float16 v;
  std::memcpy(&v, &h, sizeof v);
  return static_cast<float>(v);
#else
  return fp16_to_fp32(h);
#endif
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);  // the format is little-endian, as is every host we build for
  return v;
}

// --- decoding in 32-bit lanes -----------------------------------------------------------------
//
// The block kernels read the packed bytes 8 at a time as two 32-bit words and, in 8-lane loops,
// take byte l of the pair as (word_of(l) >> 8*(l%4)) & 0xff. Every vector in such a loop is 32
// bits wide (ints and floats), which is the shape GCC vectorizes into clean AVX2/AVX-512 code:
// broadcast, variable shift, mask, convert, FMA. Loops that mix 8-bit and 32-bit lanes (decoding
// into an int8 array, or converting bytes directly) made GCC 12 fall back to 128-bit or 64-bit
// vectors and shuffle through the stack, 2-5x slower.

struct words8 {
  uint32_t lo, hi;  // bytes 0-3 and 4-7, little-endian
};

inline words8 load8(const uint8_t* p) {
  words8 w;
  std::memcpy(&w.lo, p, 4);
  std::memcpy(&w.hi, p + 4, 4);
  return w;
}

// The word holding byte l (0..7): l < 4 ? lo : hi, written with a mask, because a ?: here
// sometimes turns into a branch that stops GCC from vectorizing the loop ("control flow in loop").
inline uint32_t word_of(words8 w, int l) {
  const uint32_t sel = 0u - static_cast<uint32_t>(l >> 2);
  return w.lo ^ ((w.lo ^ w.hi) & sel);
}

// Byte l (0..7) of the pair, shifted right by `extra` more bits (to reach a nibble or a bit);
// callers mask what they need.
inline uint32_t byte_bits(words8 w, int l, int extra) { return word_of(w, l) >> (8 * (l & 3) + extra); }

// Byte l of the pair as a signed value (shift it to the top, arithmetic shift back down).
inline int signed_byte(words8 w, int l) {
  return static_cast<int32_t>(word_of(w, l) << (24 - 8 * (l & 3))) >> 24;
}

}  // namespace tandem::quant_detail
