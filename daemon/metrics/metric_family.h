// metric_family: one metric name's series, one per combination of label values (requests by op
// and outcome, tokens by model). Lookup takes a mutex, so callers look a series up once per
// request (or keep the reference: series live as long as the family) and add to it lock-free.
#pragma once

#include <cassert>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tandem::metrics {

template <class Metric>
class metric_family {
 public:
  using factory = std::function<std::unique_ptr<Metric>()>;

  explicit metric_family(std::vector<std::string> label_names,
                         factory make = [] { return std::make_unique<Metric>(); })
      : label_names_(std::move(label_names)), make_(std::move(make)) {}

  // The series of these label values (in label_names order), made at its first use.
  Metric& at(const std::vector<std::string>& values) {
    assert(values.size() == label_names_.size());
    std::lock_guard lk(mu_);
    auto& slot = series_[values];
    if (!slot) slot = make_();
    return *slot;
  }

  // Calls f(labels, metric) for every series, ordered by label values (a stable text).
  template <class F>
  void each(F&& f) const {
    std::lock_guard lk(mu_);
    std::vector<std::pair<std::string, std::string>> labels(label_names_.size());
    for (const auto& [values, m] : series_) {
      for (std::size_t i = 0; i < values.size(); ++i) labels[i] = {label_names_[i], values[i]};
      f(labels, *m);
    }
  }

 private:
  std::vector<std::string> label_names_;
  factory make_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> series_;
};

}  // namespace tandem::metrics
