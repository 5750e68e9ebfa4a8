// Compiled with -mf16c: half.h takes its F16C intrinsic path here. The test calls these only
// after checking that the CPU has F16C.
#include <cstdint>

#include "quant/half.h"

static_assert(TANDEM_HALF_F16C == 1, "this file must be compiled with F16C enabled");

float probe_f16c_fp16_to_fp32(uint16_t h) { return tandem::fp16_to_fp32(h); }
uint16_t probe_f16c_fp32_to_fp16(float f) { return tandem::fp32_to_fp16(f); }
