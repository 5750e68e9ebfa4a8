// The tensor split's communication: one rank per device of a split, each used by the thread that
// drives that device. Two implementations: tandem's own exchange (kernels/collective.h) over peer
// access or mapped host memory, and NCCL where the build found it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
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

// How the ranks reach each other. automatic: peer when every pair of devices has peer access,
// else host. peer: each device's inbox in its own memory, written by the others over NVLink or
// PCIe peer-to-peer. host: the inboxes in mapped pinned host memory (no peer access needed, as
// in containers where PCIe peer-to-peer is off or broken). nccl: NCCL's all-reduce (a build
// with NCCL; its buffers take hundreds of MiB per device, more than the plan counts).
enum class collective_transport { automatic, peer, host, nccl };

// "auto", "peer", "host", "nccl"; anything else is an error naming the accepted words.
result<collective_transport> parse_collective_transport(std::string_view s);
std::string_view collective_transport_name(collective_transport t);
// TANDEM_CUDA_EXCHANGE from the environment; unset or empty: automatic.
result<collective_transport> collective_transport_from_env();

// One rank per device, rank i on devices[i] (distinct CUDA device ids). The transport actually
// used is written to *used when given.
result<std::vector<std::unique_ptr<cuda_collective>>> make_cuda_collectives(const std::vector<int>& devices,
                                                                            collective_transport transport,
                                                                            collective_transport* used = nullptr);

// The implementations (cuda_exchange.cpp, cuda_nccl.cpp).
result<std::vector<std::unique_ptr<cuda_collective>>> make_exchange_collectives(const std::vector<int>& devices,
                                                                                bool host_memory);
result<std::vector<std::unique_ptr<cuda_collective>>> make_nccl_collectives(const std::vector<int>& devices);

}  // namespace tandem
