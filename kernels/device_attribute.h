// An attribute of the current CUDA device, read once per device: launchers ask on every launch
// (compute capability, multiprocessor count), and cudaDeviceGetAttribute is not free.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

namespace tandem {

// The attribute A of the current device, or 0 when there is no current device or the query failed.
template <cudaDeviceAttr A>
int device_attribute() {
  constexpr int k_max_devices = 64;
  static std::atomic<int> cache[k_max_devices];  // value + 1; 0: not read yet
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= k_max_devices) return 0;
  int v = cache[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    int a = 0;
    if (cudaDeviceGetAttribute(&a, A, dev) != cudaSuccess) return 0;
    v = a + 1;
    cache[dev].store(v, std::memory_order_relaxed);
  }
  return v - 1;
}

}  // namespace tandem
