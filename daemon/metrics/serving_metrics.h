// serving_metrics: tandemd's counters and histograms (requests by outcome, tokens, time to first
// token, inter-token latency, swaps) and their rendering, with the gauges of the status op, as
// Prometheus text: what the `metrics` op returns (tandem-protocol(7)). The daemon keeps them
// because it sees every request, also those of socket clients that never pass through HTTP.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "metrics/counter.h"
#include "metrics/histogram.h"
#include "metrics/metric_family.h"

namespace tandem::daemon {

// One model alias's series. Kept per alias, not per file: a swap keeps the alias's history.
struct model_series {
  metrics::counter prompt_tokens;
  metrics::counter reused_tokens;
  metrics::counter generated_tokens;
  metrics::histogram first_token{metrics::first_token_buckets()};
  metrics::histogram inter_token{metrics::inter_token_buckets()};
  metrics::histogram swap_seconds{metrics::swap_buckets()};
};

class serving_metrics {
 public:
  serving_metrics();

  // The series of an alias (made at its first use; the reference stays valid). One lookup per
  // request; the per-token work then touches only the histogram.
  model_series& model(const std::string& alias) { return models_.at({alias}); }

  // A request's final reply: outcome is "ok", "cancelled" (a generation cancelled by its client
  // or a disconnect) or the error code of the reply.
  void request_done(std::string_view op, std::string_view outcome);
  // A finished swap: outcome as for requests; the duration is observed for successful ones.
  void swap_done(const std::string& alias, std::string_view outcome, double seconds);

  // The exposition text: the counters and histograms, then gauges read off `status` (the status
  // op's result, so both report the same figures).
  std::string render(const nlohmann::json& status);

 private:
  metrics::metric_family<metrics::counter> requests_{{"op", "outcome"}};
  metrics::metric_family<metrics::counter> swaps_{{"model", "outcome"}};
  metrics::metric_family<model_series> models_{{"model"}};
};

}  // namespace tandem::daemon
