// Measures the copy-bandwidth and fp16-GEMM ceilings with CUDA events (medians after warm-up).
#include "backend/cuda/cuda_ceilings.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "backend/cuda/cuda_context.h"
#include "kernels/cuda_check.h"
#include "kernels/layer_ops.h"

namespace tandem {
namespace {

// Median milliseconds of `reps` timed runs of `op` after two untimed ones.
result<double> time_median(const cuda_context& ctx, int reps, const std::function<status()>& op) {
  cudaEvent_t a = nullptr, b = nullptr;
  TANDEM_CUDA_TRY(cudaEventCreate(&a));
  TANDEM_CUDA_TRY(cudaEventCreate(&b));
  std::vector<double> ms;
  status st;
  for (int i = 0; i < reps + 2 && st; ++i) {
    cudaEventRecord(a, ctx.stream());
    st = op();
    cudaEventRecord(b, ctx.stream());
    if (cudaEventSynchronize(b) != cudaSuccess) st = make_error("CUDA error while timing");
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    if (i >= 2) ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (!st) return st.err();
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

result<device_ceilings> measure_ceilings(int device, size_t copy_bytes, int gemm_size, int reps) {
  auto ctx = cuda_context::create(device);
  if (!ctx) return ctx.err();
  const cuda_context& c = **ctx;
  device_ceilings out;
  out.device = c.description();
  out.copy_bytes = copy_bytes;
  out.gemm_size = gemm_size;
  {
    device_buffer src, dst;
    TANDEM_TRY(src.alloc(copy_bytes));
    TANDEM_TRY(dst.alloc(copy_bytes));
    TANDEM_CUDA_TRY(cudaMemsetAsync(src.get(), 0x5a, copy_bytes, c.stream()));
    auto ms = time_median(c, reps, [&]() -> status {
      TANDEM_CUDA_TRY(cudaMemcpyAsync(dst.get(), src.get(), copy_bytes, cudaMemcpyDeviceToDevice, c.stream()));
      return {};
    });
    if (!ms) return ms.err();
    out.copy_gbps = 2.0 * double(copy_bytes) / (*ms * 1e-3) / 1e9;
  }
  {
    const size_t n = size_t(gemm_size) * gemm_size;
    std::vector<float> host(n);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (auto& v : host) {  // uniform in [-1, 1): random data, never zeros
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v = float(int64_t(s >> 40) - (1ll << 23)) / float(1 << 23);
    }
    device_buffer f, a, b, y;
    TANDEM_TRY(f.alloc(n * sizeof(float)));
    TANDEM_TRY(a.alloc(n * 2));
    TANDEM_TRY(b.alloc(n * 2));
    TANDEM_TRY(y.alloc(n * sizeof(float)));
    TANDEM_CUDA_TRY(cudaMemcpy(f.get(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    TANDEM_CUDA_TRY(launch_to_f16(f.get<float>(), a.get<uint16_t>(), int64_t(n), c.stream()));
    std::reverse(host.begin(), host.end());
    TANDEM_CUDA_TRY(cudaMemcpy(f.get(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    TANDEM_CUDA_TRY(launch_to_f16(f.get<float>(), b.get<uint16_t>(), int64_t(n), c.stream()));
    const float one = 1.f, zero = 0.f;
    const int m = gemm_size;
    auto ms = time_median(c, reps, [&]() -> status {
      TANDEM_CUBLAS_TRY(cublasGemmEx(c.blas(), CUBLAS_OP_T, CUBLAS_OP_N, m, m, m, &one, a.get(), CUDA_R_16F, m,
                                     b.get(), CUDA_R_16F, m, &zero, y.get(), CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT));
      return {};
    });
    if (!ms) return ms.err();
    out.gemm_tflops = 2.0 * double(m) * m * m / (*ms * 1e-3) / 1e12;
  }
  return out;
}

}  // namespace tandem
