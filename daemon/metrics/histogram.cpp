// histogram: bucket search, the lock-free adds, and the scrape-time snapshot.
#include "metrics/histogram.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace tandem::metrics {

histogram::histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(std::make_unique<std::atomic<std::uint64_t>[]>(bounds_.size() + 1)) {
  assert(std::all_of(bounds_.begin(), bounds_.end(), [](double b) { return std::isfinite(b); }));
  assert(std::adjacent_find(bounds_.begin(), bounds_.end(), std::greater_equal<>()) == bounds_.end());
  for (std::size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void histogram::observe_n(double v, std::uint64_t n) {
  if (n == 0 || std::isnan(v)) return;
  // The first bound >= v: a value equal to a bound belongs to that bucket (le is inclusive).
  const auto i = static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(n, std::memory_order_relaxed);
  sum_.fetch_add(v * static_cast<double>(n), std::memory_order_relaxed);
}

histogram_snapshot histogram::snapshot() const {
  histogram_snapshot s;
  s.bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  std::uint64_t total = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.count = total;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> first_token_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};
}

std::vector<double> inter_token_buckets() {
  return {0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075,
          0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5, 5, 10, 60};
}

std::vector<double> swap_buckets() { return {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}; }

}  // namespace tandem::metrics
