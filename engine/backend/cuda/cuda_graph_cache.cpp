// Graph capture and replay for repeated forward steps (see cuda_graph_cache.h).
#include "backend/cuda/cuda_graph_cache.h"

#include "kernels/cuda_check.h"

namespace tandem {

void cuda_graph_cache::clear() {
  for (auto& [key, exec] : execs_) cudaGraphExecDestroy(exec);
  execs_.clear();
  seen_.clear();
}

status cuda_graph_cache::run(const graph_key& key, cudaStream_t stream, const std::function<status()>& enqueue) {
  if (auto it = execs_.find(key); it != execs_.end()) {
    ++replays_;
    TANDEM_CUDA_TRY(cudaGraphLaunch(it->second, stream));
    return {};
  }
  if (refused_.count(key)) return enqueue();
  if (seen_.size() > 4 * k_max_graphs) seen_.clear();
  if (seen_.insert(key).second) return enqueue();
  return capture(key, stream, enqueue);
}

status cuda_graph_cache::capture(const graph_key& key, cudaStream_t stream, const std::function<status()>& enqueue) {
  // Thread-local mode: only this thread's unsafe calls (allocations) break the capture, and
  // then they fail instead of running, so nothing is half-done when we fall back.
  TANDEM_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const status st = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  cudaGraphExec_t exec = nullptr;
  bool ok = st.ok() && end == cudaSuccess && graph;
  if (ok) ok = cudaGraphInstantiateWithFlags(&exec, graph, 0) == cudaSuccess;
  if (graph) cudaGraphDestroy(graph);
  if (!ok) {
    (void)cudaGetLastError();  // the failed capture's sticky-free error
    refused_.insert(key);
    return enqueue();
  }
  if (execs_.size() >= k_max_graphs) {
    for (auto& [k, e] : execs_) cudaGraphExecDestroy(e);
    execs_.clear();
  }
  execs_.emplace(key, exec);
  ++replays_;
  TANDEM_CUDA_TRY(cudaGraphLaunch(exec, stream));
  return {};
}

}  // namespace tandem
