// L2 prefetch of weight ranges (kernels/l2_prefetch.h): threads take 16 KiB chunks round robin.
#include "kernels/l2_prefetch.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "kernels/device_attribute.h"
#include "kernels/l2_prefetch.cuh"

namespace tandem {
namespace {

constexpr int k_threads = 128, k_max_blocks = 32;
constexpr uint64_t k_chunk = 16384;

struct ranges {
  const uint8_t* ptr[k_l2_prefetch_max_ranges];
  uint64_t bytes[k_l2_prefetch_max_ranges];  // multiples of 16
  int n;
};

// 0: not read from the environment yet; 1 off; 2 on.
std::atomic<int> g_self{0};

__global__ void __launch_bounds__(k_threads) l2_prefetch_kernel(ranges r) {
  const uint64_t nth = uint64_t{gridDim.x} * k_threads, tid = uint64_t{blockIdx.x} * k_threads + threadIdx.x;
  uint64_t first = 0;  // global index of range i's first chunk
  for (int i = 0; i < r.n; ++i) {
    const uint64_t chunks = (r.bytes[i] + k_chunk - 1) / k_chunk;
    // This thread's chunks are those whose global index is tid modulo nth.
    for (uint64_t j = (tid + nth - first % nth) % nth; j < chunks; j += nth) {
      const uint64_t off = j * k_chunk, left = r.bytes[i] - off;
      l2_prefetch_span(r.ptr[i] + off, static_cast<int64_t>(left < k_chunk ? left : k_chunk));
    }
    first += chunks;
  }
}

constexpr uint64_t k_expert_chunk = 2048;

struct expert_ranges {
  const uint8_t* base[k_l2_prefetch_max_ranges];
  uint64_t stride[k_l2_prefetch_max_ranges], chunks[k_l2_prefetch_max_ranges], bytes[k_l2_prefetch_max_ranges];
  int n, n_pairs, n_expert;
  const int32_t* ids;
};

// Global chunk j: pair j / per_pair, then range and chunk within it.
__global__ void __launch_bounds__(32) l2_prefetch_experts_kernel(expert_ranges r, uint64_t per_pair) {
  const uint64_t nth = uint64_t{gridDim.x} * 32, total = per_pair * r.n_pairs;
  for (uint64_t j = uint64_t{blockIdx.x} * 32 + threadIdx.x; j < total; j += nth) {
    const int pair = static_cast<int>(j / per_pair);
    uint64_t c = j % per_pair;
    int i = 0;
    while (c >= r.chunks[i]) c -= r.chunks[i++];
    const int e = __ldg(r.ids + pair);
    if (e < 0 || e >= r.n_expert) continue;
    const uint64_t off = c * k_expert_chunk, left = r.bytes[i] - off;
    l2_prefetch_span(r.base[i] + e * r.stride[i] + off, static_cast<int64_t>(left < k_expert_chunk ? left : k_expert_chunk));
  }
}

}  // namespace

cudaError_t launch_l2_prefetch_experts(const int32_t* ids, int n_pairs, int n_expert, const l2_expert_range* in, int n,
                                       cudaStream_t stream) {
  if (n < 0 || n > k_l2_prefetch_max_ranges || (n > 0 && !in) || n_pairs < 0 || n_expert < 1) return cudaErrorInvalidValue;
  expert_ranges r{};
  uint64_t per_pair = 0;
  for (int i = 0; i < n; ++i) {
    if (in[i].bytes == 0) continue;
    if (!in[i].base || reinterpret_cast<uintptr_t>(in[i].base) % 16 != 0 || in[i].stride % 16 != 0)
      return cudaErrorInvalidValue;
    r.base[r.n] = static_cast<const uint8_t*>(in[i].base);
    r.stride[r.n] = in[i].stride, r.bytes[r.n] = in[i].bytes;
    per_pair += r.chunks[r.n++] = (in[i].bytes + k_expert_chunk - 1) / k_expert_chunk;
  }
  if (r.n == 0 || n_pairs == 0) return cudaSuccess;
  if (!ids) return cudaErrorInvalidValue;
  r.ids = ids, r.n_pairs = n_pairs, r.n_expert = n_expert;
  const uint64_t chunks = per_pair * uint64_t(n_pairs);
  const int sms = std::max(1, device_attribute<cudaDevAttrMultiProcessorCount>());
  const uint64_t blocks = std::min<uint64_t>((chunks + 31) / 32, 4 * uint64_t(sms));
  l2_prefetch_experts_kernel<<<static_cast<unsigned>(blocks), 32, 0, stream>>>(r, per_pair);
  return cudaGetLastError();
}

void l2_set_self_prefetch(bool on) { g_self.store(on ? 2 : 1, std::memory_order_relaxed); }

uint64_t l2_self_prefetch_budget() {
  int v = g_self.load(std::memory_order_relaxed);
  if (v == 0) {
    const char* e = std::getenv("TANDEM_CUDA_SELF_PREFETCH");
    v = e && e[0] == '1' && e[1] == 0 ? 2 : 1;
    g_self.store(v, std::memory_order_relaxed);
  }
  return v == 2 ? static_cast<uint64_t>(device_attribute<cudaDevAttrL2CacheSize>()) / 2 : 0;
}

cudaError_t launch_l2_prefetch(const l2_range* in, int n, cudaStream_t stream) {
  if (n < 0 || n > k_l2_prefetch_max_ranges || (n > 0 && !in)) return cudaErrorInvalidValue;
  ranges r{};
  uint64_t chunks = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t bytes = in[i].bytes & ~uint64_t{15};
    if (bytes == 0) continue;
    if (!in[i].ptr || reinterpret_cast<uintptr_t>(in[i].ptr) % 16 != 0) return cudaErrorInvalidValue;
    r.ptr[r.n] = static_cast<const uint8_t*>(in[i].ptr);
    r.bytes[r.n++] = bytes;
    chunks += (bytes + k_chunk - 1) / k_chunk;
  }
  if (r.n == 0) return cudaSuccess;
  const uint64_t blocks = std::min<uint64_t>((chunks + k_threads - 1) / k_threads, k_max_blocks);
  l2_prefetch_kernel<<<static_cast<unsigned>(blocks), k_threads, 0, stream>>>(r);
  return cudaGetLastError();
}

}  // namespace tandem
