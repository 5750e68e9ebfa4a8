// The tensor split's communication: one NCCL communicator per device of a split, each used by the
// thread that drives that device. Built only with NCCL (TANDEM_HAVE_NCCL); without it a tensor
// split is refused with a message saying so.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "core/result.h"

namespace tandem {

// One rank of a group of devices that sum and broadcast float buffers. Calls enqueue on the
// given stream (they may be captured into a CUDA graph); every rank must make the same calls in
// the same order, each from the thread driving its device.
class cuda_collective {
 public:
  virtual ~cuda_collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // buf (n floats on this rank's device) becomes the sum over all ranks' buf.
  virtual status all_reduce_sum(float* buf, size_t n, cudaStream_t stream) = 0;
  // Every rank's buf becomes root's.
  virtual status broadcast(float* buf, size_t n, int root, cudaStream_t stream) = 0;
};

// Whether this build can make collectives (it was built with NCCL).
bool cuda_collectives_available();

// One collective per device, rank i on devices[i] (distinct CUDA device ids).
result<std::vector<std::unique_ptr<cuda_collective>>> make_cuda_collectives(const std::vector<int>& devices);

}  // namespace tandem
