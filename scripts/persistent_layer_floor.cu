// What a decode layer's steps cost at the least, run two ways over 48 layers of a step list (the
// Qwen3-30B-A3B shape's and a Qwen3.5-35B-A3B DeltaNet layer's, as launched and folded; see
// docs/PERFORMANCE.md, "What 50% would take"): (1) a chain of launches, one a step, as the backend
// runs them (programmatic dependent launch; weights known ahead are copied into shared memory
// before each launch's wait, the experts' only after it); (2) one persistent kernel, a block an
// SM, whose producer warp streams every step's share of weights into a ring of shared-memory
// stages without pausing at step boundaries (the experts' once routing is done) while eight
// consumer warps wait on per-step counters instead of launches. No arithmetic: consumers read
// their bytes, so both are floors of their design.
// Build and run: nvcc -std=c++17 -arch=sm_90 -o /tmp/layer scripts/persistent_layer_floor.cu && /tmp/layer
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int k_consumers = 8, k_threads = 32 * (k_consumers + 1);
constexpr int k_stages = 4;
constexpr uint32_t k_stage_bytes = 48 << 10;

// A step: bytes of weights each block reads (0: a step with no weights, as the norms and routing),
// and the step whose completion its weights' choice waits on (-1: known ahead; the experts' wait on
// routing).
struct step {
  uint64_t offset;  // into the weight pool, of block 0's share; block b's follows at b * share
  uint32_t share;
  int weights_after;
};

__device__ __forceinline__ uint32_t sa(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void bar_init(uint64_t* b, uint32_t n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(b)), "r"(n));
}
__device__ __forceinline__ void bar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sa(b)) : "memory");
}
__device__ __forceinline__ void bar_expect(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* b, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done)
                 : "r"(sa(b)), "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void bulk(void* dst, const void* src, uint32_t bytes, uint64_t* b) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(dst)),
               "l"(src), "r"(bytes), "r"(sa(b))
               : "memory");
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void wait_count(const uint32_t* c, uint32_t n) {
  while (load_acquire(c) < n) __nanosleep(20);
}

__global__ void __launch_bounds__(k_threads, 1)
    persistent_layers(const uint8_t* pool, const step* steps, int n_steps, uint32_t* done, uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t full[k_stages], empty[k_stages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < k_stages; ++i) bar_init(&full[i], 1), bar_init(&empty[i], k_consumers);
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  const uint32_t n = gridDim.x;
  if (warp == k_consumers) {  // the producer
    if (lane != 0) return;
    int stage = 0;
    uint32_t use = 0;  // stage uses so far (its parity bits)
    for (int s = 0; s < n_steps; ++s) {
      const step st = steps[s];
      if (st.share == 0) continue;
      if (st.weights_after >= 0) wait_count(done + st.weights_after, n);
      const uint8_t* src = pool + st.offset + size_t{blockIdx.x} * st.share;
      for (uint32_t o = 0; o < st.share; o += k_stage_bytes) {
        const uint32_t bytes = min(k_stage_bytes, st.share - o);
        if (use >= k_stages) bar_wait(&empty[stage], ((use / k_stages) - 1) & 1);
        bar_expect(&full[stage], bytes);
        bulk(ring + stage * k_stage_bytes, src + o, bytes, &full[stage]);
        ++use, stage = (stage + 1) % k_stages;
      }
    }
    return;
  }
  int stage = 0;
  uint32_t use = 0, acc = 0;
  for (int s = 0; s < n_steps; ++s) {
    const step st = steps[s];
    if (threadIdx.x == 0 && s > 0) wait_count(done + s - 1, n);
    asm volatile("bar.sync 1, %0;" ::"n"(32 * k_consumers));
    for (uint32_t o = 0; o < st.share; o += k_stage_bytes) {
      const uint32_t bytes = min(k_stage_bytes, st.share - o);
      bar_wait(&full[stage], (use / k_stages) & 1);
      const uint8_t* b = ring + stage * k_stage_bytes;
      for (uint32_t i = 16 * (threadIdx.x); i < bytes; i += 16 * 32 * k_consumers) {
        const uint4 v = *reinterpret_cast<const uint4*>(b + i);
        acc += (v.x ^ v.y) + (v.z ^ v.w);
      }
      __syncwarp();
      if (lane == 0) bar_arrive(&empty[stage]);
      ++use, stage = (stage + 1) % k_stages;
    }
    asm volatile("bar.sync 1, %0;" ::"n"(32 * k_consumers));
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(done + s, 1u);
    }
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

// The chain's launches: a step with weights known ahead copies its share into shared memory, lets
// the next launch in and only then waits; an expert step waits first, then copies; a step without
// weights waits and ends.
__global__ void __launch_bounds__(256) chain_step(const uint8_t* w, uint32_t share, bool early, uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t buf[];
  __shared__ __align__(8) uint64_t b;
  if (!early) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0 && share > 0) {
    bar_init(&b, 1);
    asm volatile("fence.proxy.async.shared::cta;");
    bar_expect(&b, share);
    for (uint32_t o = 0; o < share; o += 16384)
      bulk(buf + o, w + size_t{blockIdx.x} * share + o, min(16384u, share - o), &b);
  }
  asm volatile("griddepcontrol.launch_dependents;");
  if (early) asm volatile("griddepcontrol.wait;" ::: "memory");
  __syncthreads();
  if (share == 0) return;
  bar_wait(&b, 0);
  uint32_t acc = 0;
  for (uint32_t i = 16 * threadIdx.x; i < share; i += 16 * 256) {
    const uint4 v = *reinterpret_cast<const uint4*>(buf + i);
    acc += (v.x ^ v.y) + (v.z ^ v.w);
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

}  // namespace

// Times one step list, 48 layers of it, both ways.
void run_layers(const char* name, const double* mb, const int* after, int per_layer) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int layers = 48;
  const size_t pool_bytes = size_t{3} << 30;
  uint8_t* pool = nullptr;
  uint32_t *sink = nullptr, *done = nullptr;
  step* dsteps = nullptr;
  if (cudaMalloc(&pool, pool_bytes) != cudaSuccess) return;
  cudaMalloc(&sink, 1 << 20), cudaMemset(pool, 0x5a, pool_bytes);
  std::vector<step> steps;
  uint64_t at = 0;
  double layer_mb = 0;
  for (int l = 0; l < layers; ++l)
    for (int i = 0; i < per_layer; ++i) {
      const uint32_t share = static_cast<uint32_t>(mb[i] * (1 << 20) / sms) / 16 * 16;
      steps.push_back({at, share, after[i] < 0 ? -1 : l * per_layer + after[i]});
      at += (size_t{share} * sms + 4095) / 4096 * 4096;
      if (l == 0) layer_mb += double(share) * sms / (1 << 20);
    }
  if (at > pool_bytes) return;
  const int n_steps = static_cast<int>(steps.size());
  cudaMalloc(&dsteps, sizeof(step) * n_steps), cudaMalloc(&done, 4 * n_steps);
  cudaMemcpy(dsteps, steps.data(), sizeof(step) * n_steps, cudaMemcpyHostToDevice);
  std::printf("%s: %d layers of %d steps, %.2f MiB of weights a layer, %d SMs\n", name, layers, per_layer, layer_mb,
              sms);
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);

  const size_t ring_bytes = size_t{k_stages} * k_stage_bytes;
  cudaFuncSetAttribute(persistent_layers, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ring_bytes));
  float best = 1e9f;
  for (int r = 0; r < 6; ++r) {
    cudaMemsetAsync(done, 0, 4 * n_steps, s);
    cudaEventRecord(e0, s);
    // Cooperative: refused, not hung, if a block an SM cannot all be resident at once.
    const uint8_t* p0 = pool;
    void* args[] = {&p0, &dsteps, const_cast<int*>(&n_steps), &done, &sink};
    cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistent_layers), sms, k_threads, args, ring_bytes, s);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (r > 0) best = std::min(best, ms);
  }
  std::printf("persistent, %d stages of %u KiB: %.2f us a layer (%.0f GB/s) [%s]\n", k_stages, k_stage_bytes >> 10,
              1e3 * best / layers, layer_mb * 1.048576 * layers / best, cudaGetErrorString(cudaGetLastError()));

  // The chain, captured in one graph.
  cudaFuncSetAttribute(chain_step, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 << 10);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (const step& st : steps) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.gridDim = sms, cfg.blockDim = 256, cfg.dynamicSmemBytes = st.share, cfg.stream = s, cfg.attrs = a,
    cfg.numAttrs = 1;
    cudaLaunchKernelEx(&cfg, chain_step, static_cast<const uint8_t*>(pool + st.offset), st.share,
                       st.weights_after < 0, sink);
  }
  cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&ge, g, 0);
  best = 1e9f;
  for (int r = 0; r < 6; ++r) {
    cudaEventRecord(e0, s);
    cudaGraphLaunch(ge, s);
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (r > 0) best = std::min(best, ms);
  }
  std::printf("chain of launches: %.2f us a layer (%.0f GB/s) [%s]\n", 1e3 * best / layers,
              layer_mb * 1.048576 * layers / best, cudaGetErrorString(cudaGetLastError()));
  cudaGraphExecDestroy(ge), cudaGraphDestroy(g), cudaStreamDestroy(s);
  cudaFree(pool), cudaFree(sink), cudaFree(done), cudaFree(dsteps);
}

int main() {
  // One Qwen3-30B-A3B-shaped layer at Q4_K_M as the backend runs it, 11 launches: q/k/v, RoPE and
  // KV store, attention, wo, FFN norm, router (F32), routing, the 8 experts' gate+up, SwiGLU,
  // down, combine (with the next layer's norm). Sizes in MiB; the experts' wait on routing.
  const double mb11[] = {5.31, 0, 0, 4.72, 0, 1.05, 0, 14.16, 0, 7.08, 0};
  const int after11[] = {-1, -1, -1, -1, -1, -1, -1, 6, -1, 6, -1};
  run_layers("today's 11 steps", mb11, after11, 11);
  // The same bytes with every weightless step folded into a neighbour: q/k/v (+ RoPE, store),
  // attention + wo, norm + router, routing + gate+up + SwiGLU, down + combine.
  const double mb5[] = {5.31, 4.72, 1.05, 14.16, 7.08};
  const int after5[] = {-1, -1, -1, 2, 2};
  run_layers("5 steps", mb5, after5, 5);
  // A Qwen3.5-35B-A3B-shaped DeltaNet layer at Q4_K_M, its chain: the Q5_K q/k/v projection (with
  // the second stream's z, beta and alpha, 4.57 MiB, counted here), conv, the delta rule (its
  // 2 MiB state read; the write is not modelled), gated norm, out, FFN norm, the F32 router
  // (with the second stream's shared expert, 1.95 MiB), routing, the experts' gate+up+SwiGLU,
  // down (Q6_K), combine.
  const double mb35[] = {15.57, 0.13, 2.0, 0, 4.5, 0, 3.95, 0, 9.0, 6.56, 0};
  const int after35[] = {-1, -1, -1, -1, -1, -1, -1, 7, -1, 7, -1};
  run_layers("35B DeltaNet layer, 11 steps", mb35, after35, 11);
  // Folded to 6: conv into the projection (a channel's conv needs only its own row), the gated
  // norm into the rule (a head's 128 values), the FFN norm into the router, routing into the
  // experts' first launch, the combine into down.
  const double mb35f[] = {15.57, 2.0, 4.5, 3.95, 9.0, 6.56};
  const int after35f[] = {-1, -1, -1, -1, 3, 3};
  run_layers("35B DeltaNet layer, 6 steps", mb35f, after35f, 6);
  return 0;
}
