// token_gap_timer: inter-token latency of one generation, observed into a histogram as the
// tokens come. It sees what the engine's scheduler tells a request (runtime/scheduler.h): a call
// with "" at the start of every step (one forward pass; a decoding sequence gets exactly one
// token per step) and a call with text when a token completes some text. A token whose text is
// held back (part of a UTF-8 character, a possible stop string) makes no call of its own, so the
// steps counted since the last text say how many tokens the gap covered; it is shared evenly
// among them. finish() attributes what no text showed (a last end-of-text token) from the
// engine's decode time, so a generation of n tokens observes exactly n - 1 gaps.
#pragma once

#include <chrono>
#include <cstdint>

#include "metrics/histogram.h"

namespace tandem::metrics {

class token_gap_timer {
 public:
  using clock = std::chrono::steady_clock;

  // nullptr: measure nothing (every call is then a branch and nothing else).
  explicit token_gap_timer(histogram* gaps) : gaps_(gaps) {}

  // The engine started a step for this sequence.
  void on_step() {
    if (gaps_ && seen_text_) ++steps_;
  }
  // A token's text arrived at `now`. Text that comes with no step in between (the tail flushed
  // at the end) belongs to the token already counted.
  void on_text(clock::time_point now);
  // The generation ended with `generated` tokens, `decode_seconds` from the first to the last.
  void finish(std::uint64_t generated, double decode_seconds);

  std::uint64_t observed() const { return observed_; }

 private:
  histogram* gaps_;
  bool seen_text_ = false;
  std::uint64_t steps_ = 0;
  std::uint64_t observed_ = 0;     // gaps observed so far
  double observed_seconds_ = 0;    // their total
  clock::time_point last_{};
};

}  // namespace tandem::metrics
