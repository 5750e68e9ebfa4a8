// step_trace: the per-pass record as one text line (see step_trace.h), buffered by stdio.
#include "runtime/step_trace.h"

#include <atomic>
#include <cstdlib>

namespace tandem {
namespace {
long long us(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}
}  // namespace

// Several schedulers in one process (a model being swapped, several models) write PATH, PATH.1, ...
step_trace::step_trace() {
  static std::atomic<int> instances{0};
  const char* p = std::getenv("TANDEM_SCHEDULER_TRACE");
  if (!p || !*p) return;
  const int n = instances++;
  open(n == 0 ? std::string(p) : std::string(p) + "." + std::to_string(n));
}

step_trace::step_trace(const std::string& path) {
  if (!path.empty()) open(path);
}

void step_trace::open(const std::string& path) {
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) {
    std::fprintf(stderr, "tandem: TANDEM_SCHEDULER_TRACE: cannot write %s; no trace\n", path.c_str());
    return;
  }
  std::fprintf(f_, "# t_us plan_us forward_us post_us gap_us decode prefill rows\n");
}

step_trace::~step_trace() {
  if (f_) std::fclose(f_);
}

void step_trace::add(const step_record& r) {
  if (!f_) return;
  if (first_) t0_ = r.start, last_end_ = r.start, first_ = false;
  std::fprintf(f_, "%lld %lld %lld %lld %lld %u %u %u\n", us(r.start - t0_), us(r.planned - r.start),
               us(r.forward - r.planned), us(r.end - r.forward), us(r.start - last_end_), r.n_decode, r.n_prefill,
               r.n_rows);
  last_end_ = r.end;
}

}  // namespace tandem
