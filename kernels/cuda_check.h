// The one CUDA error check for host code: a failed runtime call becomes a tandem::error that
// names the expression, file and line, so callers report it instead of aborting the daemon.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>

#include "core/result.h"

namespace tandem {

// "CUDA error cudaErrorMemoryAllocation (out of memory) in cudaMalloc(&p, n) at file.cpp:12".
// Also clears the runtime's last-error state: a failure reported here must not resurface from a
// later launch's cudaGetLastError() (a refused device once failed the next model's first forward).
inline error cuda_error(cudaError_t code, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();
  return make_error("CUDA error ", cudaGetErrorName(code), " (", cudaGetErrorString(code), ") in ", expr,
                    " at ", file, ":", line);
}

}  // namespace tandem

// Returns tandem::error from the enclosing function (which returns status or result<T>) when
// the CUDA runtime call `expr` did not return cudaSuccess.
#define TANDEM_CUDA_TRY(expr)                                                          \
  do {                                                                                 \
    const cudaError_t tandem_cuda_e_ = (expr);                                         \
    if (tandem_cuda_e_ != cudaSuccess)                                                 \
      return ::tandem::cuda_error(tandem_cuda_e_, #expr, __FILE__, __LINE__);          \
  } while (0)

// For places that cannot return an error (destructors, cleanup paths): prints the same message
// to stderr and carries on, because a failed cudaFree must not take the daemon down.
#define TANDEM_CUDA_LOG(expr)                                                          \
  do {                                                                                 \
    const cudaError_t tandem_cuda_e_ = (expr);                                         \
    if (tandem_cuda_e_ != cudaSuccess)                                                 \
      std::fprintf(stderr, "%s\n",                                                     \
                   ::tandem::cuda_error(tandem_cuda_e_, #expr, __FILE__, __LINE__)     \
                       .message.c_str());                                              \
  } while (0)
