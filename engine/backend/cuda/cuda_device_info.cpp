// Device memory query for the planner.
#include "backend/cuda/cuda_device_info.h"

#include <cuda_runtime_api.h>

#include "kernels/cuda_check.h"

namespace tandem {

result<cuda_device_memory> query_cuda_device_memory(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    n = 0;
  }
  if (device < 0 || device >= n)
    return make_error("CUDA device ", device, " does not exist (", n, " device", n == 1 ? "" : "s", " found)");
  cuda_device_memory m;
  m.id = device;
  cudaDeviceProp props{};
  TANDEM_CUDA_TRY(cudaGetDeviceProperties(&props, device));
  m.name = props.name;
  int previous = 0;
  TANDEM_CUDA_TRY(cudaGetDevice(&previous));
  TANDEM_CUDA_TRY(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  const cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
  TANDEM_CUDA_TRY(cudaSetDevice(previous));
  TANDEM_CUDA_TRY(e);
  m.free_bytes = free_b;
  m.total_bytes = total_b;
  return m;
}

}  // namespace tandem
