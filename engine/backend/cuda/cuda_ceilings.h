// Ceilings a benchmark reports its figures against, measured on the device itself: device-to-
// device copy bandwidth (bytes read + written per second) and the cuBLAS fp16 GEMM rate.
#pragma once

#include <cstddef>
#include <string>

#include "core/result.h"

namespace tandem {

struct device_ceilings {
  std::string device;         // "NVIDIA H200 (sm_90, 139.8 GiB)"
  double copy_gbps = 0;       // median of the timed copies, (read + write) bytes / s / 1e9
  double gemm_tflops = 0;     // median, 2·m·n·k / s / 1e12, fp16 in, fp32 accumulate
  size_t copy_bytes = 0;      // size of the copied buffer
  int gemm_size = 0;          // m = n = k
};

// Times `reps` copies of copy_bytes and `reps` GEMMs of gemm_size³ on random data after warm-up.
result<device_ceilings> measure_ceilings(int device, size_t copy_bytes = 1ull << 30, int gemm_size = 8192,
                                         int reps = 10);

}  // namespace tandem
