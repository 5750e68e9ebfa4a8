// token_gap_timer: splitting a gap between text arrivals over the tokens it covered.
#include "metrics/token_gap_timer.h"

#include <algorithm>

namespace tandem::metrics {

void token_gap_timer::on_text(clock::time_point now) {
  if (!gaps_) return;
  if (!seen_text_) {
    seen_text_ = true;
    last_ = now;
    steps_ = 0;
    return;
  }
  if (steps_ == 0) return;
  const double gap = std::chrono::duration<double>(now - last_).count();
  gaps_->observe_n(gap / static_cast<double>(steps_), steps_);
  observed_ += steps_;
  observed_seconds_ += gap;
  last_ = now;
  steps_ = 0;
}

void token_gap_timer::finish(std::uint64_t generated, double decode_seconds) {
  if (!gaps_ || generated < 2 || observed_ >= generated - 1) return;
  // Tokens before the first text and after the last one: the rest of the decode time.
  const std::uint64_t left = generated - 1 - observed_;
  const double rest = std::max(0.0, decode_seconds - observed_seconds_);
  gaps_->observe_n(rest / static_cast<double>(left), left);
  observed_ += left;
}

}  // namespace tandem::metrics
