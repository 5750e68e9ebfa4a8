// Where a decode step's GPU time goes, without an external profiler (the test machines have
// none): an event after each labelled group of launches, the time between consecutive events
// charged to the label. For `tandem-model bench --profile`; off (no events) otherwise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/result.h"

namespace tandem {

class cuda_step_profile {
 public:
  cuda_step_profile() = default;
  cuda_step_profile(const cuda_step_profile&) = delete;
  cuda_step_profile& operator=(const cuda_step_profile&) = delete;
  ~cuda_step_profile();

  // A step's start on s (its first launch follows).
  status begin(cudaStream_t s);
  // After a group of launches on s: their time (since begin or the previous mark) goes to label,
  // a string literal.
  status mark(const char* label, cudaStream_t s);
  // Once the step's stream has finished: adds its times to the totals.
  status collect();

  // The same accounting from measured times (ms[i]: the time of labels[i]); collect() uses it.
  void add_step(const std::vector<const char*>& labels, const std::vector<float>& ms);

  struct row {
    std::string label;
    int64_t calls = 0;
    double ms = 0;
  };
  std::vector<row> rows() const;  // most time first
  int64_t steps() const { return steps_; }
  void reset();

 private:
  std::vector<cudaEvent_t> events_;  // a pool, reused step after step
  std::vector<const char*> labels_;  // labels_[i]: the group that ends at events_[i + 1]
  size_t used_ = 0;                  // events recorded in this step
  std::map<std::string, row> totals_;
  int64_t steps_ = 0;
};

}  // namespace tandem
