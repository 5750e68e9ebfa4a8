// What a chain of dependent launches costs with nothing to compute: N tiny kernels captured in one
// CUDA graph, each reading what the previous wrote, with and without programmatic dependent
// launch (docs/PERFORMANCE.md, MoE decode). Build and run: nvcc -std=c++17 -arch=sm_90 -o /tmp/chain
// scripts/launch_chain_floor.cu && /tmp/chain
#include <cstdio>
#include <cuda_runtime.h>
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
}
