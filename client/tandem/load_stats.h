// The figures `tandem loadgen` reports, computed from what each request recorded; pure functions
// kept apart from the socket code so that the arithmetic can be unit-tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "failure.h"

namespace tandem::client {

// What one generate request of the load recorded, successful or not.
struct request_sample {
  bool ok = false;
  exit_status status = exit_status::ok;  // failed requests: the status `tandem run` would exit with
  std::string error;                     // and its message, "CODE: message" or why the connection broke
  std::optional<double> ttft_s;         // send to first chunk; none when no chunk came
  std::vector<double> gaps_s;           // between consecutive chunks (a chunk is roughly a token)
  std::uint64_t generated_tokens = 0;   // from the final result
  std::uint64_t prompt_tokens = 0;
  std::optional<std::uint64_t> reused_tokens;  // only when the daemon reported it
  std::optional<double> decode_tok_s;   // the daemon's own rate for this request
};

struct load_summary {
  std::size_t requests = 0;
  std::size_t failures = 0;
  exit_status first_status = exit_status::ok;  // of the first failed sample, in the order given
  std::string first_error;
  double wall_s = 0;
  std::uint64_t generated_tokens = 0;
  std::uint64_t prompt_tokens = 0;
  std::optional<std::uint64_t> reused_tokens;  // set when any result carried reused_tokens
  double aggregate_tok_s = 0;                  // generated_tokens / wall_s
  std::optional<double> mean_request_tok_s;    // mean of the successful requests' decode_tok_s
  std::optional<double> ttft_p50_ms, ttft_p99_ms;
  std::optional<double> itl_p50_ms, itl_p99_ms;
};

// The nearest-rank percentile (0 < p <= 100; 0 gives the smallest) of `values`: the smallest value
// with at least p% of the values at or below it. None for no values. Sorts its copy.
std::optional<double> percentile(std::vector<double> values, double p);

// Mean of `values`; none for no values.
std::optional<double> mean(const std::vector<double>& values);

// Sums and percentiles over `samples` (failed ones count as failures only: their partial timings
// would mix aborted streams into the latencies). `wall_s` is the whole run's duration.
load_summary summarize(const std::vector<request_sample>& samples, double wall_s);

}  // namespace tandem::client
