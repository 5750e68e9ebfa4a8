// counter: a count that only grows (a Prometheus counter), added to from any thread with one
// relaxed atomic add: it orders nothing else, and a scrape only needs each value eventually.
#pragma once

#include <atomic>
#include <cstdint>

namespace tandem::metrics {

class counter {
 public:
  void add(std::uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> value_{0};
};

}  // namespace tandem::metrics
