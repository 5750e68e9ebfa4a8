// Every kernel's GPU start and end, as the chain really runs them (CUDA graphs, programmatic
// dependent launches, the second stream), recorded by CUPTI's activity API: the device machine has
// no Nsight Systems, and ncu times each kernel alone. Loaded into any program with LD_PRELOAD; at
// exit it writes one CSV line a kernel to $TIMELINE_OUT (default /tmp/timeline.csv): start and end
// in ns, stream, graph, graph node, grid and block sizes, and the demangled name.
// scripts/timeline_step.py reads it.
// Build: g++ -std=c++17 -O2 -shared -fPIC -o /tmp/libtimeline.so scripts/kernel_timeline.cpp
//   -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -L/usr/local/cuda/extras/CUPTI/lib64 -lcupti
// Run:   LD_PRELOAD=/tmp/libtimeline.so tandem-model bench -m M -p 0 -n 8 -r 1 --no-ceilings
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct kernel_record {
  uint64_t start, end, graph_node;
  uint32_t stream, graph;
  int32_t grid, block;
  std::string name;
};

std::mutex g_mutex;
std::vector<kernel_record> g_records;
constexpr size_t k_buffer_bytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = k_buffer_bytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, k_buffer_bytes));
  *max_records = 0;
}

std::string demangled(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  return s;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
    g_records.push_back({k->start, k->end, k->graphNodeId, k->streamId, k->graphId, k->gridX * k->gridY * k->gridZ,
                         k->blockX * k->blockY * k->blockZ, demangled(k->name)});
  }
  std::free(buffer);
}

void write_out() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const char* path = std::getenv("TIMELINE_OUT");
  std::FILE* f = std::fopen(path && *path ? path : "/tmp/timeline.csv", "w");
  if (!f) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(f, "start_ns,end_ns,stream,graph,graph_node,grid,block,name\n");
  for (const kernel_record& k : g_records) {
    std::string name = k.name;
    for (char& c : name)
      if (c == ',' || c == '\n') c = ';';
    std::fprintf(f, "%llu,%llu,%u,%u,%llu,%d,%d,%s\n", static_cast<unsigned long long>(k.start),
                 static_cast<unsigned long long>(k.end), k.stream, k.graph,
                 static_cast<unsigned long long>(k.graph_node), k.grid, k.block, name.c_str());
  }
  std::fclose(f);
  std::fprintf(stderr, "kernel_timeline: %zu kernels\n", g_records.size());
}

// Registered before the program initialises CUDA, so this runs after the runtime's own exit
// handlers: CUPTI still holds the records and hands them over on the forced flush.
__attribute__((constructor)) void start_tracing() {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_timeline: CUPTI refused the kernel activity\n");
    return;
  }
  std::atexit(write_out);
}

}  // namespace
