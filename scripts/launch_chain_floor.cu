// What a chain of dependent launches costs (docs/PERFORMANCE.md, MoE decode), timed from CUDA
// graphs: (1) with nothing to compute, N tiny kernels each reading what the previous wrote, with
// and without programmatic dependent launch (PDL); (2) when each streams S bytes of its own from
// HBM (the decode mat-vecs without their arithmetic), S from 0.5 to 64 MB, with PDL waiting
// before the reads (inputs from the launch before, as the expert mat-vecs' ids), PDL waiting only
// after them (weights read during the previous launch's tail), and plain launches; (3) the same
// bytes copied into shared memory (one block an SM) before the wait, the next launch let in at
// once; (4) asked of L2 before the wait, then read through registers, at 1, 2 and 8 blocks an SM.
// Build and run: nvcc -std=c++17 -arch=sm_90 -o /tmp/chain scripts/launch_chain_floor.cu && /tmp/chain
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

__device__ __forceinline__ void wait_prev(bool pdl) {
#if __CUDA_ARCH__ >= 900
  if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void let_next(bool pdl) {
#if __CUDA_ARCH__ >= 900
  if (pdl) asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__global__ void step(const float* in, float* out, int n, int pdl) {
  wait_prev(pdl);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? in[i] : 0.f;
  let_next(pdl);
  if (i < n) out[i] = v * 1.0001f + 1.f;
}

// The grid reads n16 16-byte words, four independent loads a thread an iteration; the caller
// writes the sum only where it is a value the data almost never gives, so the loads stay and the
// writes add no traffic.
__device__ __forceinline__ uint32_t read_all(const uint4* w, size_t n16) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  uint32_t acc = 0;
  size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = w[i], b = w[i + stride], c = w[i + 2 * stride], d = w[i + 3 * stride];
    acc += (a.x ^ b.y) + (c.z ^ d.w) + (a.w ^ d.x);
  }
  for (; i < n16; i += stride) acc += w[i].x;
  return acc;
}

__global__ void __launch_bounds__(256) stream(const uint4* w, size_t n16, uint32_t* sink, bool pdl, bool wait_first) {
  if (wait_first) wait_prev(pdl);
  const uint32_t acc = read_all(w, n16);
  if (!wait_first) wait_prev(pdl);
  let_next(pdl);
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

// The persistent-layer question asked of PDL: one block an SM pulls its whole share of S bytes
// into shared memory (cp.async.bulk onto an mbarrier), lets the next launch start at once, and
// only then waits for the launch before; with <= 96 KiB a block two launches share an SM, so a
// launch's weights stream while the one before still computes.
__global__ void __launch_bounds__(256) stream_smem(const uint8_t* w, uint32_t share, uint32_t* sink, bool pdl) {
  extern __shared__ __align__(128) uint8_t buf[];
  __shared__ __align__(8) uint64_t bar;
#if __CUDA_ARCH__ >= 900
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b));
    asm volatile("fence.proxy.async.shared::cta;");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(share) : "memory");
    const uint8_t* src = w + size_t{blockIdx.x} * share;
    for (uint32_t o = 0; o < share; o += 16384) {
      const uint32_t n = min(16384u, share - o);
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                       static_cast<uint32_t>(__cvta_generic_to_shared(buf + o))),
                   "l"(src + o), "r"(n), "r"(b)
                   : "memory");
    }
  }
  let_next(pdl);
  wait_prev(pdl);
  __syncthreads();
  uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(b)
                 : "memory");
  uint32_t acc = 0;
  for (uint32_t i = threadIdx.x * 16; i < share; i += 256 * 16) {
    const uint4 v = *reinterpret_cast<const uint4*>(buf + i);
    acc += (v.x ^ v.y) + (v.z ^ v.w);
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
#endif
}

// The same bytes asked of L2 before the wait (cp.async.bulk.prefetch.L2, every block its own
// contiguous slice, the next launch let in at once) and read through registers after it: what
// a mat-vec that keeps its register loads would get from an early start.
__global__ void __launch_bounds__(256) stream_l2(const uint4* w, size_t n16, uint32_t* sink, bool pdl) {
#if __CUDA_ARCH__ >= 900
  const size_t slice = (n16 + gridDim.x - 1) / gridDim.x;
  const size_t b0 = min(n16, size_t{blockIdx.x} * slice), b1 = min(n16, b0 + slice);
  for (size_t o = b0 + threadIdx.x * 1024; o < b1; o += 256 * 1024) {
    const uint32_t n = static_cast<uint32_t>(min(size_t{1024}, b1 - o) * 16);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(w + o), "r"(n) : "memory");
  }
  let_next(pdl);
  wait_prev(pdl);
  const uint32_t acc = read_all(w, n16);
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
#endif
}

// Microseconds a launch of a graph of N launches, launch(k, cfg) capturing the k-th (cfg has the
// PDL attribute set or not).
template <class F>
double us_per_launch(cudaStream_t s, int N, bool pdl, F&& launch) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (int k = 0; k < N; ++k) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.stream = s, cfg.attrs = at, cfg.numAttrs = pdl ? 1 : 0;
    launch(k, cfg);
  }
  cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&ge, g, 0);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  for (int w = 0; w < 3; ++w) cudaGraphLaunch(ge, s);
  const int reps = 10;
  cudaEventRecord(e0, s);
  for (int r = 0; r < reps; ++r) cudaGraphLaunch(ge, s);
  cudaEventRecord(e1, s);
  cudaEventSynchronize(e1);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaGraphExecDestroy(ge), cudaGraphDestroy(g), cudaEventDestroy(e0), cudaEventDestroy(e1);
  return 1e3 * ms / reps / N;
}

int main() {
  cudaStream_t s;
  cudaStreamCreate(&s);
  float *a, *b;
  const int n = 1 << 14;
  cudaMalloc(&a, n * 4), cudaMalloc(&b, n * 4), cudaMemset(a, 0, n * 4);
  for (int blocks : {1, 64, 132, 528})
    for (int pdl = 0; pdl < 2; ++pdl) {
      const int N = 672, nn = std::min(blocks * 256, n);
      const double us = us_per_launch(s, N, pdl, [&](int k, cudaLaunchConfig_t& cfg) {
        cfg.gridDim = blocks, cfg.blockDim = 256;
        cudaLaunchKernelEx(&cfg, step, (const float*)(k & 1 ? b : a), (k & 1 ? a : b), nn, pdl);
      });
      std::printf("chain of %d kernels, %d blocks, pdl %d: %.2f us per kernel, %.3f ms per chain (%s)\n", N, blocks,
                  pdl, us, us * N / 1e3, cudaGetErrorString(cudaGetLastError()));
    }

  const size_t pool = size_t{2} << 30;
  uint8_t* w = nullptr;
  uint32_t* sink = nullptr;
  if (cudaMalloc(&w, pool) != cudaSuccess || cudaMalloc(&sink, 1 << 20) != cudaSuccess) return 1;
  cudaMemset(w, 0x5a, pool);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int blocks = sms * 8;  // 2,048 threads an SM
  for (double mb : {0.5, 1.0, 2.0, 4.0, 8.0, 14.0, 32.0, 64.0}) {
    const size_t bytes = static_cast<size_t>(mb * (1 << 20)) / 16 * 16;
    // At least 96 launches (two a layer of a 48-layer model), and enough that a slice is read
    // again only after 512 MB of others (ten L2s), the graph's replays included; slices 8 MB or
    // more apart, wrapping round the pool.
    const int N = static_cast<int>(std::max<size_t>(96, (size_t{512} << 20) / bytes));
    const size_t apart = std::max<size_t>(bytes, size_t{8} << 20);
    const char* names[3] = {"pdl, wait first", "pdl, wait after reads", "plain launches"};
    std::printf("stream %5.1f MB a launch:", mb);
    for (int way = 0; way < 3; ++way) {
      const double us = us_per_launch(s, N, way < 2, [&](int k, cudaLaunchConfig_t& cfg) {
        cfg.gridDim = blocks, cfg.blockDim = 256;
        const size_t at = (size_t(k) * apart) % (pool - bytes);
        cudaLaunchKernelEx(&cfg, stream, reinterpret_cast<const uint4*>(w + at), bytes / 16, sink, way < 2, way == 0);
      });
      std::printf("  %s %.2f us (%.0f GB/s)", names[way], us, bytes / us / 1e3);
    }
    std::printf("  [%s]\n", cudaGetErrorString(cudaGetLastError()));
  }
  // The same through shared memory, one block an SM, the next launch let in before the wait.
  cudaFuncSetAttribute(stream_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 << 10);
  for (double mb : {0.5, 1.0, 2.0, 4.0, 8.0, 12.0}) {
    const uint32_t share = std::min<uint32_t>(96 << 10, static_cast<uint32_t>(mb * (1 << 20) / sms) / 16 * 16);
    const size_t bytes = size_t{share} * sms;
    const int N = static_cast<int>(std::max<size_t>(96, (size_t{512} << 20) / bytes));
    const size_t apart = std::max<size_t>(bytes, size_t{8} << 20);
    std::printf("smem %5.1f MB a launch:", bytes / double(1 << 20));
    for (int pdl = 1; pdl >= 0; --pdl) {
      const double us = us_per_launch(s, N, pdl, [&](int k, cudaLaunchConfig_t& cfg) {
        cfg.gridDim = sms, cfg.blockDim = 256, cfg.dynamicSmemBytes = share;
        const size_t at = (size_t(k) * apart) % (pool - bytes) / 16 * 16;
        cudaLaunchKernelEx(&cfg, stream_smem, static_cast<const uint8_t*>(w + at), share, sink, pdl == 1);
      });
      std::printf("  %s %.2f us (%.0f GB/s)", pdl ? "pdl, bulk copy before the wait" : "plain launches", us,
                  bytes / us / 1e3);
    }
    std::printf("  [%s]\n", cudaGetErrorString(cudaGetLastError()));
  }
  for (double mb : {1.0, 2.0, 4.0, 8.0, 14.0, 32.0}) {
    const size_t bytes = static_cast<size_t>(mb * (1 << 20)) / 16 * 16;
    const int N = static_cast<int>(std::max<size_t>(96, (size_t{512} << 20) / bytes));
    const size_t apart = std::max<size_t>(bytes, size_t{8} << 20);
    std::printf("l2 %5.1f MB a launch:", mb);
    for (int per_sm : {1, 2, 8}) {
      const double us = us_per_launch(s, N, true, [&](int k, cudaLaunchConfig_t& cfg) {
        cfg.gridDim = sms * per_sm, cfg.blockDim = 256;
        const size_t at = (size_t(k) * apart) % (pool - bytes);
        cudaLaunchKernelEx(&cfg, stream_l2, reinterpret_cast<const uint4*>(w + at), bytes / 16, sink, true);
      });
      std::printf("  pdl, L2 prefetch first, %d blocks an SM %.2f us (%.0f GB/s)", per_sm, us, bytes / us / 1e3);
    }
    std::printf("  [%s]\n", cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
