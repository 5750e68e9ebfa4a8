// step_trace: one line per scheduler pass written to the file TANDEM_SCHEDULER_TRACE names, to find
// where serving's inter-token latency goes (the forward pass itself, the host's work around it, or
// time the scheduler sat idle) without a profiler. Off (and free) when the variable is unset.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tandem {

struct step_record {
  std::chrono::steady_clock::time_point start;   // the pass's admit() began
  std::chrono::steady_clock::time_point planned;  // its batch was ready (admit, cancels, plan)
  std::chrono::steady_clock::time_point forward;  // the backend returned
  std::chrono::steady_clock::time_point end;      // tokens handed to their requests
  uint32_t n_decode = 0;   // sequences given one token this pass
  uint32_t n_prefill = 0;  // prompt tokens in it
  uint32_t n_rows = 0;     // logits rows sampled
};

class step_trace {
 public:
  // Reads TANDEM_SCHEDULER_TRACE (the process's first scheduler writes PATH, later ones PATH.1,
  // PATH.2, ...); a file that cannot be opened is reported on stderr.
  step_trace();
  explicit step_trace(const std::string& path);  // "" : off
  ~step_trace();
  step_trace(const step_trace&) = delete;
  step_trace& operator=(const step_trace&) = delete;

  bool on() const { return f_ != nullptr; }
  // Columns (microseconds from the first record, then durations): t_us plan_us forward_us post_us
  // gap_us (since the previous pass ended) decode prefill rows.
  void add(const step_record& r);

 private:
  void open(const std::string& path);
  std::FILE* f_ = nullptr;
  std::chrono::steady_clock::time_point t0_{}, last_end_{};
  bool first_ = true;
};

}  // namespace tandem
