// The compute capability the loaded kernels were built for, which host code follows when it picks a
// path: a compute_70 PTX build JIT-run on an H200 must launch as on a V100 (scripts/volta_build.sh).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace tandem {

// 10 × major + minor of the code the current device runs: the device's own compute capability, or
// the lower one of the PTX when the binary holds no code for this device. 0 without a device.
int kernel_arch();

// The most dynamic shared memory one block may ask for: the device's opt-in limit, capped at that
// of kernel_arch() (V100: 96 KiB) when the kernels target an older chip than this one.
int kernel_smem_optin();

// Lets kernel use bytes of dynamic shared memory, or refuses with cudaErrorInvalidValue what
// kernel_smem_optin() does not allow, so an emulated V100 fails where a real one would.
template <class K>
cudaError_t allow_dynamic_smem(K* kernel, int bytes) {
  if (bytes > kernel_smem_optin()) return cudaErrorInvalidValue;
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

// allow_dynamic_smem for kernel K (always asking the same bytes) once per device, for launchers
// on a hot path: the attribute call is not repeated at every launch.
template <auto K>
cudaError_t allow_dynamic_smem_once(int bytes) {
  constexpr int k_max_devices = 64;
  static std::atomic<uint64_t> raised{0};  // bit d: done on device d
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= k_max_devices) return cudaErrorInvalidDevice;
  if (raised.load(std::memory_order_relaxed) >> dev & 1u) return cudaSuccess;
  const cudaError_t e = allow_dynamic_smem(K, bytes);
  if (e == cudaSuccess) raised.fetch_or(uint64_t{1} << dev, std::memory_order_relaxed);
  return e;
}

}  // namespace tandem
