// The tensor split's one-shot sum and broadcast (see collective.h). Small decode messages are
// latency-bound: one kernel per device that writes straight into its peers' memory and waits on a
// flag costs a few microseconds where a general collective library spends tens.
#include "kernels/collective.h"

#include "kernels/pdl.cuh"

namespace tandem {
namespace {

constexpr int k_unroll = 4;
constexpr int k_word_threads = 256;
static_assert(k_exchange_slice % 4 == 0 && k_exchange_slice <= 1024, "a slice is one float4 or float per thread");
constexpr uint64_t k_timeout_ns = 30ull * 1000 * 1000 * 1000;

// Release/acquire at system scope: the flag's store makes the slice written before it visible to
// the peer that reads the flag, whether the slice went over NVLink, PCIe peer access or host memory.
__device__ __forceinline__ void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until the counter reaches epoch (counters wrap; peers are never a full 2^31 calls apart).
__device__ void wait_flag(const uint32_t* flag, uint32_t epoch) {
  const uint64_t t0 = global_ns();
  while (int32_t(load_acquire(flag) - epoch) < 0)
    if (global_ns() - t0 > k_timeout_ns) __trap();  // a peer that never came: fail, do not hang
}

// A float and the call counter in one 8-byte word: a naturally aligned 8-byte access is single-copy
// atomic, so a receiver that sees this call's counter also sees its float.
__device__ __forceinline__ uint64_t flagged(float v, uint32_t epoch) {
  return (uint64_t(epoch) << 32) | __float_as_uint(v);
}

__device__ __forceinline__ void store_words(uint64_t* p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

__device__ __forceinline__ void load_words(const uint64_t* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}

// Spins until both words of a pair carry this call's counter; returns their floats.
__device__ float2 wait_words(const uint64_t* p, uint32_t epoch) {
  uint64_t a, b;
  load_words(p, a, b);
  if (uint32_t(a >> 32) != epoch || uint32_t(b >> 32) != epoch) {
    const uint64_t t0 = global_ns();
    do {
      if (global_ns() - t0 > k_timeout_ns) __trap();  // a peer that never came: fail, do not hang
      load_words(p, a, b);
    } while (uint32_t(a >> 32) != epoch || uint32_t(b >> 32) != epoch);
  }
  return make_float2(__uint_as_float(uint32_t(a)), __uint_as_float(uint32_t(b)));
}

// Every block of every call bumps its own counter; all blocks run in every call, so the counters
// of all blocks and all ranks agree call by call.
__device__ uint32_t next_epoch(const exchange_view& v) {
  __shared__ uint32_t s_epoch;
  if (threadIdx.x == 0) s_epoch = v.epochs[blockIdx.x] + 1, v.epochs[blockIdx.x] = s_epoch;
  __syncthreads();
  return s_epoch;
}

// Small messages: each thread sends its pairs of floats as flagged words to every peer, then waits
// for the peers' words at the same places and combines (sum in rank order, or root's value). A
// broadcast's receivers send too: their words tell the root they are done with the call before,
// whose parity its next call reuses.
template <bool kBroadcast>
__global__ void __launch_bounds__(k_word_threads) exchange_words_kernel(exchange_view v, float* x, int64_t n,
                                                                        int root) {
  pdl_wait();
  pdl_trigger();  // the next kernel may fetch its weights while this one waits on the link
  const uint32_t epoch = next_epoch(v);
  const int64_t parity = epoch & 1u, pairs = (n + 1) / 2;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  auto box = [&](int owner, int src) { return v.words[owner] + (src * 2 + parity) * k_exchange_words; };
  for (int64_t j = first; j < pairs; j += stride) {
    const int64_t i = 2 * j;
    const uint64_t a = flagged(x[i], epoch), b = flagged(i + 1 < n ? x[i + 1] : 0.f, epoch);
    for (int p = 0; p < v.size; ++p)
      if (p != v.rank) store_words(box(p, v.rank) + i, a, b);
  }
  for (int64_t j = first; j < pairs; j += stride) {
    const int64_t i = 2 * j;
    const float2 own = make_float2(x[i], i + 1 < n ? x[i + 1] : 0.f);
    float2 acc = make_float2(0.f, 0.f);
    for (int r = 0; r < v.size; ++r) {
      const float2 val = r == v.rank ? own : wait_words(box(v.rank, r) + i, epoch);
      if (kBroadcast) {
        if (r == root) acc = val;
      } else {
        acc.x += val.x, acc.y += val.y;
      }
    }
    x[i] = acc.x;
    if (i + 1 < n) x[i + 1] = acc.y;
  }
}

template <int W>
struct vec;
template <>
struct vec<1> {
  using type = float;
  __device__ static float add(float a, float b) { return a + b; }
  __device__ static float zero() { return 0.f; }
};
template <>
struct vec<4> {
  using type = float4;
  __device__ static float4 add(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
  __device__ static float4 zero() { return make_float4(0.f, 0.f, 0.f, 0.f); }
};

// Block b moves slices b, b + grid, ... of x, one element per thread per slice, k_unroll slices
// at a time so that each thread has several loads in flight (large prefill messages are
// bandwidth-bound). Phases: push the slices into the peers' inboxes (slot of this rank and the
// call's parity), raise this block's flag in each peer, wait for the peers' flags, combine. The
// parity alternates per block, so a fast peer's next call never overwrites a slot a slow peer
// still reads: it cannot start call e+2 before this rank has signalled call e+1.
template <int W, bool kBroadcast>
__global__ void __launch_bounds__(k_exchange_slice / W) exchange_kernel(exchange_view v, float* x, int64_t n,
                                                                        int root) {
  using V = vec<W>;
  using T = typename V::type;
  constexpr int64_t per_slice = k_exchange_slice / W;  // == blockDim.x
  pdl_wait();
  pdl_trigger();  // the next kernel may fetch its weights while this one waits on the link
  const int b = blockIdx.x;
  const uint32_t epoch = next_epoch(v);
  const int parity = int(epoch & 1u);
  auto slot = [&](int owner, int src) {
    return reinterpret_cast<T*>(v.inbox[owner] + (int64_t(src) * 2 + parity) * v.capacity);
  };
  T* mine = reinterpret_cast<T*>(x);
  const int64_t count = n / W, grid = gridDim.x;
  // Calls f(i[], ok[]) for this thread's elements of slices s, s + grid, ... (k_unroll of them).
  auto for_each = [&](auto&& f) {
    for (int64_t s = b; s * per_slice < count; s += k_unroll * grid) {
      int64_t i[k_unroll];
      bool ok[k_unroll];
#pragma unroll
      for (int u = 0; u < k_unroll; ++u) i[u] = (s + u * grid) * per_slice + threadIdx.x, ok[u] = i[u] < count;
      f(i, ok);
    }
  };

  if (!kBroadcast || v.rank == root) {
    for_each([&](const int64_t* i, const bool* ok) {
      T val[k_unroll];
#pragma unroll
      for (int u = 0; u < k_unroll; ++u)
        if (ok[u]) val[u] = mine[i[u]];
#pragma unroll
      for (int u = 0; u < k_unroll; ++u)
        if (ok[u])
          for (int p = 0; p < v.size; ++p)
            if (p != v.rank) slot(p, v.rank)[i[u]] = val[u];
    });
    __threadfence_system();
  }
  __syncthreads();
  // Every rank signals and waits for every peer, the broadcast's receivers too: their flag tells
  // the root they are done with the call before, whose slot parity the root's next call reuses.
  const int t = threadIdx.x;
  if (t < v.size && t != v.rank) {
    store_release(v.flags[t] + v.rank * k_exchange_blocks + b, epoch);
    wait_flag(v.flags[v.rank] + t * k_exchange_blocks + b, epoch);
  }
  __syncthreads();

  if (kBroadcast) {
    if (v.rank != root)
      for_each([&](const int64_t* i, const bool* ok) {
#pragma unroll
        for (int u = 0; u < k_unroll; ++u)
          if (ok[u]) mine[i[u]] = __ldcg(slot(v.rank, root) + i[u]);
      });
    return;
  }
  for_each([&](const int64_t* i, const bool* ok) {
    T acc[k_unroll];
#pragma unroll
    for (int u = 0; u < k_unroll; ++u) acc[u] = V::zero();
    for (int r = 0; r < v.size; ++r) {
#pragma unroll
      for (int u = 0; u < k_unroll; ++u)
        if (ok[u]) acc[u] = V::add(acc[u], r == v.rank ? mine[i[u]] : __ldcg(slot(v.rank, r) + i[u]));
    }
#pragma unroll
    for (int u = 0; u < k_unroll; ++u)
      if (ok[u]) mine[i[u]] = acc[u];
  });
}

template <bool kBroadcast>
cudaError_t launch(const exchange_view& v, float* x, int64_t n, int root, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (n < 0 || n > v.capacity || v.size < 1 || v.size > k_exchange_max_ranks || v.rank < 0 || v.rank >= v.size ||
      root < 0 || root >= v.size || v.capacity % k_exchange_slice != 0)
    return cudaErrorInvalidValue;
  const dim3 grid(k_exchange_blocks);  // every call, so that the blocks' counters stay equal
  if (n <= k_exchange_words)
    return launch_pdl(exchange_words_kernel<kBroadcast>, grid, dim3(k_word_threads), s, v, x, n, root);
  const bool vec4 = n % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (vec4) return launch_pdl(exchange_kernel<4, kBroadcast>, grid, dim3(k_exchange_slice / 4), s, v, x, n, root);
  return launch_pdl(exchange_kernel<1, kBroadcast>, grid, dim3(k_exchange_slice), s, v, x, n, root);
}

}  // namespace

cudaError_t launch_exchange_sum(const exchange_view& v, float* x, int64_t n, cudaStream_t stream) {
  return launch<false>(v, x, n, 0, stream);
}

cudaError_t launch_exchange_broadcast(const exchange_view& v, float* x, int64_t n, int root, cudaStream_t stream) {
  return launch<true>(v, x, n, root, stream);
}

}  // namespace tandem
