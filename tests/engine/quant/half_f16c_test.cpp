// half.h's F16C path (half_f16c_probe.cpp is compiled with -mf16c) against the portable path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "quant/half.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

float probe_f16c_fp16_to_fp32(uint16_t h);
uint16_t probe_f16c_fp32_to_fp16(float f);

namespace {

using namespace tandem;

// CPUID leaf 1: F16C (ecx bit 29) and AVX (bit 28) supported, OSXSAVE (bit 27) set and the OS
// saving the YMM state (XCR0 bits 1 and 2). (Clang 14 has no __builtin_cpu_supports("f16c").)
bool have_f16c() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const unsigned need = (1u << 29) | (1u << 28) | (1u << 27);
  if ((c & need) != need) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 6u) == 6u;
#else
  return false;
#endif
}

TEST(HalfF16c, MatchesPortable) {
  if (!have_f16c()) GTEST_SKIP() << "CPU without F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = probe_f16c_fp16_to_fp32(static_cast<uint16_t>(h));
    const float b = fp16_to_fp32_portable(static_cast<uint16_t>(h));
    ASSERT_EQ(f32_to_bits(a), f32_to_bits(b)) << h;  // NaNs too: both quiet signalling NaNs
  }
  for (uint64_t u = 0; u <= 0xffffffffu; u += 257) {
    const float f = f32_from_bits(static_cast<uint32_t>(u));
    ASSERT_EQ(probe_f16c_fp32_to_fp16(f), fp32_to_fp16_portable(f)) << std::hex << u;
  }
}

}  // namespace
