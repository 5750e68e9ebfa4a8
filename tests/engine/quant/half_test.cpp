// fp16 / bf16 conversions against independent references (exact decodes built from the IEEE
// definitions, rounding done in double with nearbyint), exhaustively where the domain allows.
#include "quant/half.h"

#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace {

using namespace tandem;

uint32_t bits(float f) { return f32_to_bits(f); }

// Reference fp16 decode straight from the definition.
double ref_fp16_value(uint16_t h) {
  const int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) {
    v = std::ldexp(static_cast<double>(m), -24);
  } else if (e == 31) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(static_cast<double>(1024 + m), e - 25);
  }
  return sign ? -v : v;
}

// Reference fp32 -> fp16 with round-to-nearest-even done by nearbyint in double.
uint16_t ref_fp32_to_fp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00);
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return static_cast<uint16_t>(sign | 0x7c00);
  if (a < std::ldexp(1.0, -14)) {
    // subnormal quantum 2^-24; a result of 1024 is the smallest normal, whose bits are also 1024
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * std::ldexp(1.0, 24))));
  }
  int e;
  std::frexp(a, &e);                                       // a = f * 2^e, f in [0.5, 1)
  e -= 1;                                                  // a in [2^e, 2^(e+1))
  double m = std::nearbyint(a * std::ldexp(1.0, 10 - e));  // 1024 .. 2048
  if (m == 2048.0) {
    m = 1024.0;
    e += 1;
  }
  if (e > 15) return static_cast<uint16_t>(sign | 0x7c00);
  return static_cast<uint16_t>(sign | ((e + 15) << 10) | (static_cast<int>(m) - 1024));
}

// Reference fp32 -> bf16 (8 significant bits), RNE in double.
uint16_t ref_fp32_to_bf16(float f) {
  if (std::isnan(f)) return static_cast<uint16_t>((bits(f) >> 16) | 0x40);
  const double a = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (a == 0.0 || std::isinf(f)) return static_cast<uint16_t>(bits(f) >> 16);
  int e;
  std::frexp(a, &e);
  e -= 1;
  if (e < -126) e = -126;  // subnormal range: fixed quantum 2^-133
  const double q = std::ldexp(1.0, e - 7);
  const double r = std::nearbyint(a / q) * q;
  if (r >= std::ldexp(1.0, 128)) return static_cast<uint16_t>(sign | 0x7f80);
  return static_cast<uint16_t>(sign | (bits(static_cast<float>(r)) >> 16));
}

TEST(Half, Fp16ToFp32ExhaustiveMatchesDefinition) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32_portable(static_cast<uint16_t>(h));
    const double ref = ref_fp16_value(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f)) << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;
      // payload kept in the top 10 mantissa bits of the fp32; signalling NaNs come out quiet
      EXPECT_EQ((bits(f) >> 13) & 0x3ff, (h & 0x3ff) | 0x200) << h;
    } else {
      EXPECT_EQ(static_cast<double>(f), ref) << h;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << h;  // -0.0 stays -0.0
    }
    EXPECT_EQ(bits(fp16_to_fp32(static_cast<uint16_t>(h))), bits(f)) << h;
  }
}

TEST(Half, Fp16RoundTripExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t back = fp32_to_fp16_portable(fp16_to_fp32_portable(static_cast<uint16_t>(h)));
    const bool nan = ((h >> 10) & 31) == 31 && (h & 1023) != 0;
    if (nan) {
      EXPECT_EQ(back, static_cast<uint16_t>(h | 0x0200)) << h;  // quieted, payload and sign kept
    } else {
      EXPECT_EQ(back, h) << h;
    }
    EXPECT_EQ(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))), back) << h;
  }
}

TEST(Half, Fp32ToFp16RoundsToNearestEvenAtEveryBoundary) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  // Every midpoint between consecutive finite fp16 values (positive and negative), and the float
  // just below and above it: exactly the inputs where rounding decisions happen.
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    for (uint16_t s : {uint16_t{0}, uint16_t{0x8000}}) {
      const float a = fp16_to_fp32_portable(static_cast<uint16_t>(h | s));
      const float b = fp16_to_fp32_portable(static_cast<uint16_t>((h + 1) | s));
      const float mid = static_cast<float>((static_cast<double>(a) + static_cast<double>(b)) / 2);
      ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(a) + static_cast<double>(b)) / 2);  // exact
      const uint16_t even = (h & 1) ? static_cast<uint16_t>((h + 1) | s) : static_cast<uint16_t>(h | s);
      EXPECT_EQ(fp32_to_fp16_portable(mid), even) << h;
      EXPECT_EQ(fp32_to_fp16_portable(std::nextafter(mid, 0.0f)), h | s) << h;
      EXPECT_EQ(fp32_to_fp16_portable(std::nextafter(mid, s ? -1e9f : 1e9f)), (h + 1) | s) << h;
      EXPECT_EQ(fp32_to_fp16(mid), even) << h;
    }
  }
}

TEST(Half, Fp32ToFp16EdgeCases) {
  EXPECT_EQ(fp32_to_fp16_portable(0.0f), 0x0000);
  EXPECT_EQ(fp32_to_fp16_portable(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16_portable(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16_portable(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16_portable(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16_portable(65519.99f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16_portable(65520.0f), 0x7c00);  // tie between 65504 (odd) and 2^16: even = inf
  EXPECT_EQ(fp32_to_fp16_portable(1e10f), 0x7c00);
  EXPECT_EQ(fp32_to_fp16_portable(-1e10f), 0xfc00);
  EXPECT_EQ(fp32_to_fp16_portable(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(fp32_to_fp16_portable(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(fp32_to_fp16_portable(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16_portable(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(fp32_to_fp16_portable(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(fp32_to_fp16_portable(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 quanta: tie -> 2
  EXPECT_EQ(fp32_to_fp16_portable(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(fp32_to_fp16_portable(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into normals
  EXPECT_EQ(fp32_to_fp16_portable(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(fp32_to_fp16_portable(-std::numeric_limits<float>::denorm_min()), 0x8000);
  const uint16_t qnan = fp32_to_fp16_portable(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(qnan & 0x7e00, 0x7e00);
  const uint16_t nnan = fp32_to_fp16_portable(-std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nnan & 0xfe00, 0xfe00);
  // a signalling NaN whose payload lives only in the low bits must not become inf
  EXPECT_EQ(fp32_to_fp16_portable(f32_from_bits(0x7f800001u)) & 0x7e00, 0x7e00);
}

TEST(Half, Fp32ToFp16SweepMatchesReference) {
  // Every 251st float bit pattern (17 million values, all exponents and signs).
  for (uint64_t u = 0; u <= 0xffffffffu; u += 251) {
    const float f = f32_from_bits(static_cast<uint32_t>(u));
    const uint16_t got = fp32_to_fp16_portable(f);
    const uint16_t want = ref_fp32_to_fp16(f);
    if (std::isnan(f)) {
      ASSERT_EQ(got & 0xfe00, want & 0xfe00) << u;
    } else {
      ASSERT_EQ(got, want) << std::hex << u;
    }
    ASSERT_EQ(fp32_to_fp16(f), got) << u;
  }
}

TEST(Bf16, ExhaustiveDecodeAndRoundTrip) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(b));
    EXPECT_EQ(bits(f), b << 16);
    const bool nan = ((b >> 7) & 0xff) == 0xff && (b & 0x7f) != 0;
    const uint16_t back = fp32_to_bf16(f);
    if (nan) {
      EXPECT_EQ(back, static_cast<uint16_t>(b | 0x40)) << b;
    } else {
      EXPECT_EQ(back, b) << b;
    }
  }
}

TEST(Bf16, RoundsToNearestEvenAtEveryBoundary) {
  for (uint32_t b = 0; b < 0x7f7f; ++b) {
    for (uint16_t s : {uint16_t{0}, uint16_t{0x8000}}) {
      const float a = bf16_to_fp32(static_cast<uint16_t>(b | s));
      const float c = bf16_to_fp32(static_cast<uint16_t>((b + 1) | s));
      const float mid = static_cast<float>((static_cast<double>(a) + static_cast<double>(c)) / 2);
      const uint16_t even = (b & 1) ? static_cast<uint16_t>((b + 1) | s) : static_cast<uint16_t>(b | s);
      EXPECT_EQ(fp32_to_bf16(mid), even) << b;
      EXPECT_EQ(fp32_to_bf16(std::nextafter(mid, 0.0f)), b | s) << b;
      EXPECT_EQ(fp32_to_bf16(std::nextafter(mid, s ? -INFINITY : INFINITY)), (b + 1) | s) << b;
    }
  }
}

TEST(Bf16, EdgeCasesAndSweep) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(fp32_to_bf16(f32_from_bits(0x00008000u)), 0x0000);           // tie -> even
  EXPECT_EQ(fp32_to_bf16(f32_from_bits(0x00018000u)), 0x0002);           // tie -> even (up)
  EXPECT_EQ(fp32_to_bf16(f32_from_bits(0x7f800001u)) & 0x7fc0, 0x7fc0);  // sNaN -> qNaN, not inf
  for (uint64_t u = 0; u <= 0xffffffffu; u += 251) {
    const float f = f32_from_bits(static_cast<uint32_t>(u));
    ASSERT_EQ(fp32_to_bf16(f), ref_fp32_to_bf16(f)) << std::hex << u;
  }
}

}  // namespace
