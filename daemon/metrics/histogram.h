// histogram: observations counted in fixed buckets, plus their sum (a Prometheus histogram).
// Lock-free: an observation is a binary search over the bounds and two relaxed atomic adds, cheap
// enough for once per generated token.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace tandem::metrics {

// What a scrape sees. cumulative[i] counts the observations <= bounds[i] (Prometheus' inclusive
// `le`); the last entry, one past the bounds, is +Inf and equals count.
struct histogram_snapshot {
  std::vector<double> bounds;
  std::vector<std::uint64_t> cumulative;
  std::uint64_t count = 0;
  double sum = 0;
};

class histogram {
 public:
  // `bounds`: finite, strictly increasing upper bounds (+Inf is implied). A program constant:
  // anything else is a bug (asserted).
  explicit histogram(std::vector<double> bounds);
  histogram(const histogram&) = delete;
  histogram& operator=(const histogram&) = delete;

  // NaN is dropped: one would make the sum NaN for the life of the process.
  void observe(double v) { observe_n(v, 1); }
  // `n` observations of the same value in one step (a gap shared by n tokens).
  void observe_n(double v, std::uint64_t n);

  // Each bucket is read once and _count is derived from the buckets, so the +Inf bucket always
  // equals _count even while other threads observe; the sum may be a few observations ahead.
  histogram_snapshot snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts_;  // per bucket, not cumulative; +Inf last
  std::atomic<double> sum_{0};
};

// Bucket bounds for the serving latencies, 1 ms to 60 s.
std::vector<double> first_token_buckets();  // prefill-dominated: coarse, up to a minute
std::vector<double> inter_token_buckets();  // decode steps: fine between 5 and 100 ms
std::vector<double> swap_buckets();         // a model load: 0.1 s to 10 minutes

}  // namespace tandem::metrics
