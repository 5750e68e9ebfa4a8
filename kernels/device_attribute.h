// An attribute of the current CUDA device, and the blocks of a kernel resident on it at once, each
// read once per device: launchers ask on every launch (compute capability, multiprocessor count,
// persistent grids' sizes), and the CUDA queries are not free.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
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

// Blocks of Kernel launched with Threads threads (no dynamic shared memory) that the current device
// holds at once (at least one per multiprocessor), cached per device and kernel.
template <auto Kernel, int Threads>
cudaError_t resident_blocks(int& out) {
  constexpr int k_max_devices = 64;
  static std::atomic<int> cache[k_max_devices];  // 0: not known yet
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  std::atomic<int>* slot = dev >= 0 && dev < k_max_devices ? &cache[dev] : nullptr;
  int v = slot ? slot->load(std::memory_order_relaxed) : 0;
  if (v == 0) {
    int per_sm = 0, sms = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, Threads, 0);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
    v = std::max(1, per_sm) * std::max(1, sms);
    if (slot) slot->store(v, std::memory_order_relaxed);
  }
  out = v;
  return cudaSuccess;
}

}  // namespace tandem
