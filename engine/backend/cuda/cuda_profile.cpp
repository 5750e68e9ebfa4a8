// The per-label step timing of cuda_profile.h.
#include "backend/cuda/cuda_profile.h"

#include <algorithm>

#include "kernels/cuda_check.h"

namespace tandem {

cuda_step_profile::~cuda_step_profile() {
  for (cudaEvent_t e : events_) TANDEM_CUDA_LOG(cudaEventDestroy(e));
}

status cuda_step_profile::begin(cudaStream_t s) {
  used_ = 0;
  labels_.clear();
  return mark(nullptr, s);
}

status cuda_step_profile::mark(const char* label, cudaStream_t s) {
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    TANDEM_CUDA_TRY(cudaEventCreate(&e));
    events_.push_back(e);
  }
  TANDEM_CUDA_TRY(cudaEventRecord(events_[used_], s));
  if (used_ > 0) labels_.push_back(label);
  ++used_;
  return {};
}

status cuda_step_profile::collect() {
  if (used_ < 2) return {};
  std::vector<float> ms(used_ - 1);
  TANDEM_CUDA_TRY(cudaEventSynchronize(events_[used_ - 1]));
  for (size_t i = 1; i < used_; ++i) TANDEM_CUDA_TRY(cudaEventElapsedTime(&ms[i - 1], events_[i - 1], events_[i]));
  add_step(labels_, ms);
  used_ = 0;
  labels_.clear();
  return {};
}

void cuda_step_profile::add_step(const std::vector<const char*>& labels, const std::vector<float>& ms) {
  for (size_t i = 0; i < labels.size() && i < ms.size(); ++i) {
    row& r = totals_[labels[i] ? labels[i] : "?"];
    r.label = labels[i] ? labels[i] : "?";
    ++r.calls;
    r.ms += ms[i];
  }
  ++steps_;
}

std::vector<cuda_step_profile::row> cuda_step_profile::rows() const {
  std::vector<row> out;
  for (const auto& [label, r] : totals_) out.push_back(r);
  std::stable_sort(out.begin(), out.end(), [](const row& a, const row& b) { return a.ms > b.ms; });
  return out;
}

void cuda_step_profile::reset() {
  totals_.clear();
  steps_ = 0;
  used_ = 0;
  labels_.clear();
}

}  // namespace tandem
