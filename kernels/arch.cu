// kernel_arch(): read once per device from an empty kernel's attributes (ptxVersion is the virtual
// architecture its code was compiled for), and the per-architecture shared memory limits.
#include "kernels/arch.h"

#include <algorithm>
#include <atomic>

#include "kernels/device_attribute.h"

namespace tandem {
namespace {

__global__ void arch_probe_kernel() {}

// Dynamic shared memory a block may opt into, per compute capability (CUDA programming guide,
// "Technical Specifications per Compute Capability"); 0 for an architecture not listed.
int smem_optin_of(int arch) {
  switch (arch) {
    case 70: case 72: return 96 * 1024;
    case 75: return 64 * 1024;
    case 80: case 87: return 163 * 1024;
    case 86: case 89: return 99 * 1024;
    case 90: return 227 * 1024;
    default: return 0;
  }
}

int device_arch() {
  return 10 * device_attribute<cudaDevAttrComputeCapabilityMajor>() +
         device_attribute<cudaDevAttrComputeCapabilityMinor>();
}

}  // namespace

int kernel_arch() {
  constexpr int k_max_devices = 64;
  static std::atomic<int> cache[k_max_devices];  // 0: not read yet
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= k_max_devices) return 0;
  int v = cache[dev].load(std::memory_order_relaxed);
  if (v == 0) {
    cudaFuncAttributes a = {};
    const int own = device_arch();
    v = cudaFuncGetAttributes(&a, arch_probe_kernel) == cudaSuccess && a.ptxVersion > 0 ? std::min(own, a.ptxVersion)
                                                                                         : own;
    cache[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}

int kernel_smem_optin() {
  const int own = device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>();
  const int arch = kernel_arch();
  const int capped = smem_optin_of(arch);
  return arch < device_arch() && capped > 0 ? std::min(own, capped) : own;
}

}  // namespace tandem
