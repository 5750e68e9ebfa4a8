// What a chain of dependent launches costs when each streams S bytes of its own from HBM (the
// decode chain's mat-vecs, without their arithmetic): N kernels in one CUDA graph, each reading a
// fresh S-byte slice of a 2 GiB pool with 16-byte loads over the whole GPU, for S from 0.5 to
// 64 MB, launched three ways: programmatic dependent launch waiting before the reads (a launch
// whose inputs come from the one before, as the expert mat-vecs' ids), PDL waiting only after
// them (weights that depend on nothing, read during the previous launch's tail), and plain
// launches. The floor a layer's chain of such launches cannot go under (docs/PERFORMANCE.md,
// "What 50% would take"). Build and run: nvcc -std=c++17 -arch=sm_90 -o /tmp/read_chain
// scripts/read_chain_floor.cu && /tmp/read_chain
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

__device__ __forceinline__ void wait_prev(bool pdl) {
#if __CUDA_ARCH__ >= 900
  if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// wait_first: griddepcontrol.wait before the loads, else after them. Four independent 16-byte
// loads a thread an iteration keep 64 bytes a thread in flight; the sum is written only where it
// is a value random data almost never gives, so the loads stay and the writes do not add traffic.
__global__ void __launch_bounds__(256) stream_kernel(const uint4* w, size_t n16, uint32_t* sink, bool pdl,
                                                     bool wait_first) {
  if (wait_first) wait_prev(pdl);
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  uint32_t acc = 0;
  size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = w[i], b = w[i + stride], c = w[i + 2 * stride], d = w[i + 3 * stride];
    acc += (a.x ^ b.y) + (c.z ^ d.w) + (a.w ^ d.x);
  }
  for (; i < n16; i += stride) acc += w[i].x;
  if (!wait_first) wait_prev(pdl);
#if __CUDA_ARCH__ >= 900
  if (pdl) asm volatile("griddepcontrol.launch_dependents;");
#endif
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

int main() {
  const size_t pool = size_t{2} << 30;
  uint8_t* w = nullptr;
  uint32_t* sink = nullptr;
  if (cudaMalloc(&w, pool) != cudaSuccess || cudaMalloc(&sink, 1 << 20) != cudaSuccess) return 1;
  cudaMemset(w, 0x5a, pool);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int blocks = sms * 8;  // 2,048 threads an SM
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s, %d SMs, %d blocks of 256 threads a launch\n", prop.name, sms, blocks);
  for (double mb : {0.5, 1.0, 2.0, 4.0, 8.0, 14.0, 32.0, 64.0}) {
    const size_t bytes = static_cast<size_t>(mb * (1 << 20)) / 16 * 16;
    // At least 96 launches (two a layer of a 48-layer model), and enough that a slice is read
    // again only after 512 MB of others (ten L2s), the graph's replays included.
    const int N = static_cast<int>(std::max<size_t>(96, (size_t{512} << 20) / bytes));
    const size_t stride = std::max<size_t>(bytes, size_t{8} << 20);
    const char* names[3] = {"pdl, wait first", "pdl, wait after reads", "plain launches"};
    std::printf("%5.1f MB:", mb);
    for (int way = 0; way < 3; ++way) {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
      for (int k = 0; k < N; ++k) {
        cudaLaunchConfig_t cfg = {};
        cudaLaunchAttribute at[1];
        cfg.gridDim = blocks;
        cfg.blockDim = 256;
        cfg.stream = s;
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = way < 2 ? 1 : 0;
        // A fresh slice each launch (8 MB or more apart; wrapping round the pool).
        const size_t at_byte = (size_t(k) * stride) % (pool - bytes);
        cudaLaunchKernelEx(&cfg, stream_kernel, reinterpret_cast<const uint4*>(w + at_byte), bytes / 16, sink,
                           way < 2, way == 0);
      }
      cudaStreamEndCapture(s, &g);
      cudaGraphInstantiate(&ge, g, 0);
      for (int r = 0; r < 3; ++r) cudaGraphLaunch(ge, s);
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      cudaEventRecord(e0, s);
      const int reps = 10;
      for (int r = 0; r < reps; ++r) cudaGraphLaunch(ge, s);
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      float ms = 0.f;
      cudaEventElapsedTime(&ms, e0, e1);
      const double us = 1e3 * ms / reps / N;
      std::printf("  %s %.2f us (%.0f GB/s)", names[way], us, bytes / us / 1e3);
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
    }
    std::printf("  [%s]\n", cudaGetErrorString(cudaGetLastError()));
  }
  return 0;
}
