// Host launcher that asks L2 for byte ranges a later kernel will read, so that their HBM reads
// happen while the GPU is busy with latency-bound work. Device pointers; graph capturable.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem {

constexpr int k_l2_prefetch_max_ranges = 16;

struct l2_range {
  const void* ptr = nullptr;  // 16-byte aligned; bytes 0 ranges are skipped
  uint64_t bytes = 0;
};

// A few blocks issue the prefetches (cp.async.bulk.prefetch.L2 on sm_90, prefetch.global.L2 a
// line before) and exit without waiting for the data: the launch takes a few SMs for about a
// microsecond, and nothing waits on it but the stream's next work. Each range's last bytes past a
// multiple of 16 are left out. 0 <= n <= k_l2_prefetch_max_ranges, every range with bytes > 0
// 16-byte aligned; else cudaErrorInvalidValue before anything is launched.
cudaError_t launch_l2_prefetch(const l2_range* ranges, int n, cudaStream_t stream);

// The experts a routing chose, asked for once their ids are on the device (a side stream's work
// beside the experts' mat-vecs): for each pair p < n_pairs and range i, the bytes
// [base_i + ids[p] stride_i, + bytes_i); ids outside [0, n_expert) are skipped. 2 KiB chunks
// over up to four one-warp blocks an SM, since one SM's bulk-copy unit walks its requests one
// line at a time. n <= k_l2_prefetch_max_ranges, bases and strides 16-byte aligned; else
// cudaErrorInvalidValue before anything is launched.
struct l2_expert_range {
  const void* base = nullptr;
  uint64_t stride = 0;  // bytes from one expert to the next
  uint64_t bytes = 0;   // of each expert, from its start
};
cudaError_t launch_l2_prefetch_experts(const int32_t* ids, int n_pairs, int n_expert, const l2_expert_range* ranges,
                                       int n, cudaStream_t stream);

// Self-prefetch, for the decode mat-vecs (kernels/matvec.cu, moe_matvec.cu): each walker of rows
// first asks L2 for its next few row groups (l2_prefetch.cuh), so that a launch has all its
// weight bytes requested at once rather than the one piece a thread holds in flight. The bytes
// a launch may ask for ahead: half the current device's L2 when on, 0 when off. Off unless
// TANDEM_CUDA_SELF_PREFETCH=1 (read at the first call) or l2_set_self_prefetch(true).
uint64_t l2_self_prefetch_budget();
void l2_set_self_prefetch(bool on);

}  // namespace tandem
