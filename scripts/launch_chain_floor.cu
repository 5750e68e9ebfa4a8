// What a chain of dependent launches costs with nothing to compute: N tiny kernels captured in one
// CUDA graph, each reading what the previous wrote, with and without programmatic dependent
// launch; and what a grid barrier costs in one persistent cooperative kernel (kernels/grid_sync.cuh,
// as the persistent MoE layer uses it), each phase reading what another block wrote
// (docs/PERFORMANCE.md, MoE decode). Build and run from the repository root:
// nvcc -std=c++17 -arch=sm_90 -I. -o /tmp/chain scripts/launch_chain_floor.cu && /tmp/chain
#include <cstdio>
#include <cuda_runtime.h>
#include "kernels/grid_sync.cuh"
__global__ void barriers(float* buf, unsigned* word, int n) {
  float v = 0.f;
  for (int k = 0; k < n; ++k) {
    if (threadIdx.x == 0) buf[blockIdx.x] = v + 1.f;
    tandem::grid_barrier(word);
    if (threadIdx.x == 0) v = __ldcg(buf + (blockIdx.x + 1) % gridDim.x);
  }
  if (threadIdx.x == 0 && v < 0.f) buf[0] = v;
}
__global__ void step(const float* in, float* out, int n, int pdl) {
#if __CUDA_ARCH__ >= 900
  if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? in[i] : 0.f;
#if __CUDA_ARCH__ >= 900
  if (pdl) asm volatile("griddepcontrol.launch_dependents;");
#endif
  if (i < n) out[i] = v * 1.0001f + 1.f;
}
int main() {
  float *a, *b; int n = 1 << 14;
  cudaMalloc(&a, n * 4); cudaMalloc(&b, n * 4); cudaMemset(a, 0, n * 4);
  cudaStream_t s; cudaStreamCreate(&s);
  for (int blocks : {1, 64, 132, 528})
  for (int pdl = 0; pdl < 2; ++pdl) {
    const int N = 672;
    cudaGraph_t g; cudaGraphExec_t ge;
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    for (int k = 0; k < N; ++k) {
      cudaLaunchConfig_t cfg = {}; cudaLaunchAttribute at[1];
      cfg.gridDim = blocks; cfg.blockDim = 256; cfg.stream = s;
      at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
      cfg.attrs = at; cfg.numAttrs = pdl;
      int nn = blocks * 256 < n ? blocks * 256 : n;
      cudaLaunchKernelEx(&cfg, step, (const float*)(k & 1 ? b : a), (k & 1 ? a : b), nn, pdl);
    }
    cudaStreamEndCapture(s, &g); cudaGraphInstantiate(&ge, g, 0);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int w = 0; w < 3; ++w) cudaGraphLaunch(ge, s);
    cudaEventRecord(e0, s);
    for (int r = 0; r < 20; ++r) cudaGraphLaunch(ge, s);
    cudaEventRecord(e1, s); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    printf("chain of %d kernels, %d blocks, pdl %d: %.2f us per kernel, %.3f ms per chain (%s)\n", N, blocks, pdl,
           1e3 * ms / 20 / N, ms / 20, cudaGetErrorString(cudaGetLastError()));
  }
  unsigned* word; cudaMalloc(&word, 4); cudaMemset(word, 0, 4);
  int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (int per_sm : {1, 2}) {
    const int N = 672, blocks = per_sm * sms;
    cudaLaunchConfig_t cfg = {}; cudaLaunchAttribute at[1];
    cfg.gridDim = blocks; cfg.blockDim = 256; cfg.stream = s;
    at[0].id = cudaLaunchAttributeCooperative; at[0].val.cooperative = 1;
    cfg.attrs = at; cfg.numAttrs = 1;
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    cudaLaunchKernelEx(&cfg, barriers, a, word, N);
    cudaEventRecord(e0, s);
    for (int r = 0; r < 20; ++r) cudaLaunchKernelEx(&cfg, barriers, a, word, N);
    cudaEventRecord(e1, s); cudaEventSynchronize(e1);
    float ms; cudaEventElapsedTime(&ms, e0, e1);
    printf("grid barriers: %d in one cooperative kernel of %d blocks: %.2f us per barrier (%s)\n", N, blocks,
           1e3 * ms / 20 / N, cudaGetErrorString(cudaGetLastError()));
  }
}
