// Per-device state of the CUDA backend (device id, stream, cuBLAS handle) and RAII owners for
// device and pinned host memory. Nothing here is global: every backend instance owns its own.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "core/result.h"

namespace tandem {

// "cuBLAS error CUBLAS_STATUS_... in expr at file:line"
error cublas_error(cublasStatus_t code, const char* expr, const char* file, int line);

#define TANDEM_CUBLAS_TRY(expr)                                                      \
  do {                                                                               \
    const cublasStatus_t tandem_blas_s_ = (expr);                                    \
    if (tandem_blas_s_ != CUBLAS_STATUS_SUCCESS)                                     \
      return ::tandem::cublas_error(tandem_blas_s_, #expr, __FILE__, __LINE__);      \
  } while (0)

// Fault injection for tests (issue 24): a cap on the bytes all device_buffers of this process
// hold together. An alloc past it fails as cudaMalloc fails on a full device (cudaErrorMemoryAllocation,
// nothing allocated), so a load's failure path runs on a GPU with room to spare. 0: no cap (the
// default; the environment variable TANDEM_CUDA_ALLOC_LIMIT, in bytes, read at the first
// allocation, sets it for a whole process such as tandemd).
void set_device_alloc_limit(size_t bytes);
size_t device_buffer_bytes();  // held by device_buffers now, over every device

// Device memory that can grow; contents are not kept across a grow.
class device_buffer {
 public:
  device_buffer() = default;
  ~device_buffer() { release(); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  status alloc(size_t bytes);    // exactly this size (frees what was there)
  status ensure(size_t bytes);   // at least this size
  void release();
  template <class T = void>
  T* get() const { return static_cast<T*>(p_); }
  size_t size() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory: the only kind cudaMemcpyAsync copies without a hidden staging copy.
class pinned_buffer {
 public:
  pinned_buffer() = default;
  ~pinned_buffer() { release(); }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  status ensure(size_t bytes);
  void release();
  template <class T = void>
  T* get() const { return static_cast<T*>(p_); }
  size_t size() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// One GPU as the backend uses it: the device is made current by activate() before any call.
class cuda_context {
 public:
  static result<std::unique_ptr<cuda_context>> create(int device);
  ~cuda_context();
  cuda_context(const cuda_context&) = delete;
  cuda_context& operator=(const cuda_context&) = delete;

  status activate() const;
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // A second stream for work that can run beside the main stream's (the shared expert beside the
  // routed ones), forked from and joined back to it by events (both work in graph capture too).
  cudaStream_t side_stream() const { return side_; }
  status fork_side() const;  // side waits for the work on stream() so far
  status join_side() const;  // stream() waits for the work on side so far
  cublasHandle_t blas() const { return blas_; }
  const cudaDeviceProp& props() const { return props_; }
  std::string description() const;  // "NVIDIA H200 (sm_90, 139.8 GiB)"

 private:
  cuda_context() = default;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cudaDeviceProp props_{};
};

// Number of usable CUDA devices (0 when there is no driver or no GPU).
int cuda_device_count();

}  // namespace tandem
