// How much of a decode token the host takes: the period between two CUDA graph launches against
// the graph's own GPU time (events recorded on its stream around it). Loaded into any program
// with LD_PRELOAD (the backend links the shared CUDA runtime); prints medians at exit.
// Build: g++ -std=c++17 -O2 -shared -fPIC -o /tmp/libhostgap.so scripts/host_gap.cpp
//   -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -ldl
// Run:   LD_PRELOAD=/tmp/libhostgap.so tandem-model bench -m M -p 0 -n 128 -r 2 --no-ceilings
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

cudaEvent_t g_events[2][2];  // two launches' (before, after), alternating
int g_cur = -1;
bool g_pending = false;
clock_type::time_point g_last;
std::vector<double> g_period, g_gpu, g_call;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct report {
  ~report() {
    if (g_period.empty()) return;
    std::fprintf(stderr,
                 "host_gap: %zu launches; median period %.1f us, graph on the GPU %.1f us (event to event), "
                 "cudaGraphLaunch call %.1f us\n",
                 g_period.size(), median(g_period), median(g_gpu), median(g_call));
  }
} g_report;

}  // namespace

// The previous launch is timed at the next one: by then the program has waited for it.
extern "C" cudaError_t cudaGraphLaunch(cudaGraphExec_t graph, cudaStream_t stream) {
  using launch_fn = cudaError_t (*)(cudaGraphExec_t, cudaStream_t);
  static const auto real = reinterpret_cast<launch_fn>(dlsym(RTLD_NEXT, "cudaGraphLaunch"));
  const auto t = clock_type::now();
  if (g_cur < 0) {
    for (auto& pair : g_events)
      for (auto& e : pair) cudaEventCreate(&e);
    g_cur = 0;
  } else if (g_pending) {
    float ms = 0.f;
    if (cudaEventQuery(g_events[g_cur][1]) == cudaSuccess &&
        cudaEventElapsedTime(&ms, g_events[g_cur][0], g_events[g_cur][1]) == cudaSuccess) {
      g_gpu.push_back(ms * 1e3);
      g_period.push_back(std::chrono::duration<double, std::micro>(t - g_last).count());
    }
    g_cur ^= 1;
  }
  cudaEventRecord(g_events[g_cur][0], stream);
  const cudaError_t r = real(graph, stream);
  g_call.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t).count());
  cudaEventRecord(g_events[g_cur][1], stream);
  g_last = t;
  g_pending = true;
  return r;
}
