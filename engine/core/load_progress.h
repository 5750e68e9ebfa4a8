// How far a model load has got: the backend adds the weight bytes it has placed (uploaded to a
// GPU) while the daemon's status reads them from another thread. Lock-free, so upload threads
// never wait on a reader.
#pragma once

#include <atomic>
#include <cstdint>

namespace tandem {

struct load_progress {
  std::atomic<uint64_t> total_bytes{0};  // weight bytes the load places; 0 until known
  std::atomic<uint64_t> done_bytes{0};   // of those, placed so far
  void start(uint64_t total) {
    done_bytes.store(0, std::memory_order_relaxed);
    total_bytes.store(total, std::memory_order_relaxed);
  }
  void add(uint64_t bytes) { done_bytes.fetch_add(bytes, std::memory_order_relaxed); }
};

}  // namespace tandem
