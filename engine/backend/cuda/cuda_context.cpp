// The CUDA backend's per-device context and memory owners.
#include "backend/cuda/cuda_context.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda_check.h"

namespace tandem {

error cublas_error(cublasStatus_t code, const char* expr, const char* file, int line) {
  return make_error("cuBLAS error ", cublasGetStatusName(code), " (", cublasGetStatusString(code), ") in ", expr,
                    " at ", file, ":", line);
}

namespace {

std::atomic<size_t> g_live_bytes{0};

// The cap, from TANDEM_CUDA_ALLOC_LIMIT until set_device_alloc_limit changes it.
std::atomic<size_t>& alloc_limit() {
  static std::atomic<size_t> limit{[] {
    const char* v = std::getenv("TANDEM_CUDA_ALLOC_LIMIT");
    return v ? static_cast<size_t>(std::strtoull(v, nullptr, 10)) : size_t{0};
  }()};
  return limit;
}

}  // namespace

void set_device_alloc_limit(size_t bytes) { alloc_limit().store(bytes); }

size_t device_buffer_bytes() { return g_live_bytes.load(); }

status device_buffer::alloc(size_t bytes) {
  release();
  if (bytes == 0) return {};
  // Counted before the allocation, so that loads running at once (tandemd's load threads) cannot
  // pass the cap together.
  const size_t held = g_live_bytes.fetch_add(bytes), limit = alloc_limit().load();
  if (limit != 0 && held + bytes > limit) {
    g_live_bytes -= bytes;
    return make_error(cuda_error(cudaErrorMemoryAllocation, "cudaMalloc", __FILE__, __LINE__).message,
                      " (TANDEM_CUDA_ALLOC_LIMIT: ", limit, " bytes, ", held, " held, ", bytes, " asked)");
  }
  if (const cudaError_t e = cudaMalloc(&p_, bytes); e != cudaSuccess) {
    g_live_bytes -= bytes;
    p_ = nullptr;
    return cuda_error(e, "cudaMalloc(&p_, bytes)", __FILE__, __LINE__);
  }
  bytes_ = bytes;
  return {};
}

status device_buffer::ensure(size_t bytes) {
  if (bytes <= bytes_) return {};
  return alloc(bytes);
}

void device_buffer::release() {
  if (p_) TANDEM_CUDA_LOG(cudaFree(p_));
  g_live_bytes -= bytes_;
  p_ = nullptr;
  bytes_ = 0;
}

status pinned_buffer::ensure(size_t bytes) {
  if (bytes <= bytes_) return {};
  release();
  TANDEM_CUDA_TRY(cudaMallocHost(&p_, bytes));
  bytes_ = bytes;
  return {};
}

void pinned_buffer::release() {
  if (p_) TANDEM_CUDA_LOG(cudaFreeHost(p_));
  p_ = nullptr;
  bytes_ = 0;
}

result<std::unique_ptr<cuda_context>> cuda_context::create(int device) {
  const int n = cuda_device_count();
  if (device < 0 || device >= n)
    return make_error("CUDA device ", device, " does not exist (", n, " device", n == 1 ? "" : "s", " found)");
  std::unique_ptr<cuda_context> ctx(new cuda_context());
  ctx->device_ = device;
  TANDEM_CUDA_TRY(cudaSetDevice(device));
  TANDEM_CUDA_TRY(cudaGetDeviceProperties(&ctx->props_, device));
  TANDEM_CUDA_TRY(cudaStreamCreateWithFlags(&ctx->stream_, cudaStreamNonBlocking));
  TANDEM_CUDA_TRY(cudaStreamCreateWithFlags(&ctx->side_, cudaStreamNonBlocking));
  TANDEM_CUDA_TRY(cudaEventCreateWithFlags(&ctx->fork_, cudaEventDisableTiming));
  TANDEM_CUDA_TRY(cudaEventCreateWithFlags(&ctx->join_, cudaEventDisableTiming));
  TANDEM_CUBLAS_TRY(cublasCreate(&ctx->blas_));
  TANDEM_CUBLAS_TRY(cublasSetStream(ctx->blas_, ctx->stream_));
  return ctx;
}

cuda_context::~cuda_context() {
  if (cudaSetDevice(device_) != cudaSuccess) return;
  if (blas_) cublasDestroy(blas_);
  if (stream_) TANDEM_CUDA_LOG(cudaStreamDestroy(stream_));
  if (side_) TANDEM_CUDA_LOG(cudaStreamDestroy(side_));
  if (fork_) TANDEM_CUDA_LOG(cudaEventDestroy(fork_));
  if (join_) TANDEM_CUDA_LOG(cudaEventDestroy(join_));
}

status cuda_context::fork_side() const {
  TANDEM_CUDA_TRY(cudaEventRecord(fork_, stream_));
  TANDEM_CUDA_TRY(cudaStreamWaitEvent(side_, fork_, 0));
  return {};
}

status cuda_context::join_side() const {
  TANDEM_CUDA_TRY(cudaEventRecord(join_, side_));
  TANDEM_CUDA_TRY(cudaStreamWaitEvent(stream_, join_, 0));
  return {};
}

status cuda_context::activate() const {
  TANDEM_CUDA_TRY(cudaSetDevice(device_));
  return {};
}

std::string cuda_context::description() const {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.256s (sm_%d%d, %.1f GiB)", props_.name, props_.major, props_.minor,
                double(props_.totalGlobalMem) / (1ull << 30));
  return buf;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

}  // namespace tandem
