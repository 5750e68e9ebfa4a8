// IEEE binary16 (fp16) and bfloat16 <-> binary32 conversions on raw bits.
//
// Plain C++17 (CUDA host code includes this too). All conversions round to nearest, ties to even,
// handle signed zeros, subnormals, infinities and NaN (NaN stays NaN with its sign and the top of
// its payload; signalling NaNs come out quiet, as with the F16C instructions).
// They assume the default floating-point environment (round to nearest, no flush-to-zero).
//
// fp16_to_fp32 is branch-free so that loops over it vectorize (the F16 vec_dot relies on that).
// When the translation unit is compiled with F16C (-mf16c, -march=haswell or later) the scalar
// conversions use the F16C instructions instead; the portable versions stay available under
// *_portable names and are what the tests compare against.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__F16C__) && !defined(__CUDACC__)
#include <immintrin.h>
#define TANDEM_HALF_F16C 1
#else
#define TANDEM_HALF_F16C 0
#endif

namespace tandem {

// Translation units compiled with and without F16C get differently named inline functions, so the
// linker never substitutes one for the other (that would be an ODR violation that can crash).
#if TANDEM_HALF_F16C
inline namespace half_f16c {
#else
inline namespace half_portable {
#endif

inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// fp16 -> fp32, exact. Branch-free: the magnitude is rebuilt two ways and one is selected.
//  - normal, inf, NaN: move exponent+mantissa into fp32 position, add (224 << 23) to the
//    exponent field and multiply by 2^-112. Net exponent bias change 127-15 = 112; exponent 31
//    (inf/NaN) becomes 255 before the multiply, and inf/NaN survive a multiply by 2^-112.
//  - zero, subnormal: mantissa m is placed in a float with exponent of 0.5 (ulp 2^-24), giving
//    0.5 + m*2^-24; subtracting 0.5 leaves m*2^-24 exactly, which is the subnormal's value.
inline float fp16_to_fp32_portable(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;  // exponent+mantissa at the top, sign shifted out
  const float normal = f32_from_bits((two_w >> 4) + (224u << 23)) * 0x1.0p-112f;
  const float subnormal = f32_from_bits((two_w >> 17) | (126u << 23)) - 0.5f;
  // exponent field zero -> take the subnormal path; a mask rather than ?: keeps GCC vectorizing
  const uint32_t mask = 0u - static_cast<uint32_t>(two_w < (1u << 27));
  const uint32_t mag = (f32_to_bits(subnormal) & mask) | (f32_to_bits(normal) & ~mask);
  return f32_from_bits(sign | mag);
}

// fp32 -> fp16, round to nearest even.
inline uint16_t fp32_to_fp16_portable(float f) {
  const uint32_t x = f32_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN: keep the top mantissa bits, force a quiet NaN
    return static_cast<uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u | ((ax >> 13) & 0x3ffu) : 0x7c00u));
  }
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {
    // |f| < 2^-14: result is subnormal (or rounds up to the smallest normal). Adding 0.5 puts the
    // value in a float whose ulp is 2^-24 = the fp16 subnormal step, so the FPU's own
    // round-to-nearest-even does the rounding; the low bits are then the fp16 encoding.
    const float t = f32_from_bits(ax) + 0.5f;
    return static_cast<uint16_t>(sign | (f32_to_bits(t) - 0x3f000000u));
  }
  // Normal: rebias the exponent (-(127-15) << 23) and round the 13 dropped mantissa bits to
  // nearest even (add 0xfff plus the lowest kept bit); a carry into the exponent is correct.
  const uint32_t odd = (ax >> 13) & 1u;
  const uint32_t r = ax - (112u << 23) + 0xfffu + odd;
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float fp16_to_fp32(uint16_t h) {
#if TANDEM_HALF_F16C
  return _cvtsh_ss(h);
#else
  return fp16_to_fp32_portable(h);
#endif
}

inline uint16_t fp32_to_fp16(float f) {
#if TANDEM_HALF_F16C
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
  return fp32_to_fp16_portable(f);
#endif
}

// bf16 is the top half of an fp32; widening is exact.
inline float bf16_to_fp32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }

// fp32 -> bf16, round to nearest even; overflow rounds to inf; NaN stays a (quiet) NaN.
inline uint16_t fp32_to_bf16(float f) {
  const uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // inline namespace
}  // namespace tandem
