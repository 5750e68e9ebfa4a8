// Captured CUDA graphs of repeated forward steps. A decode step launches hundreds of small
// kernels; replaying them as one graph removes the per-launch CPU cost that otherwise bounds it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "core/result.h"

namespace tandem {

// Everything a step's launches depend on besides device data: sizes, kernel arguments and the
// addresses of the buffers they touch. Equal keys must mean identical launch sequences.
using graph_key = std::vector<uint64_t>;

class cuda_graph_cache {
 public:
  cuda_graph_cache() = default;
  ~cuda_graph_cache() { clear(); }
  cuda_graph_cache(const cuda_graph_cache&) = delete;
  cuda_graph_cache& operator=(const cuda_graph_cache&) = delete;

  // Runs `enqueue` (which puts one step's work on `stream`) for `key`: the first time eagerly,
  // so that every buffer it needs is allocated; the second time captured into a graph that is
  // launched now and on every later call with the same key. A capture that fails (say an
  // allocation inside it) falls back to running eagerly, and that key is never captured again.
  status run(const graph_key& key, cudaStream_t stream, const std::function<status()>& enqueue);

  void clear();
  size_t size() const { return execs_.size(); }
  uint64_t replays() const { return replays_; }

 private:
  status capture(const graph_key& key, cudaStream_t stream, const std::function<status()>& enqueue);

  // Keys change every few hundred tokens at most for one sequence; a batch of sequences adds
  // one key per batch size and count of sequences in use.
  static constexpr size_t k_max_graphs = 64;
  std::map<graph_key, cudaGraphExec_t> execs_;
  std::set<graph_key> seen_, refused_;
  uint64_t replays_ = 0;
};

}  // namespace tandem
