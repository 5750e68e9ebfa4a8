// Percentiles and sums for `tandem loadgen`.
#include "load_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tandem::client {

std::optional<double> percentile(std::vector<double> values, double p) {
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  // Nearest rank: ceil(p/100 * N), 1-based, clamped so that p = 0 or a rounding error above 100
  // still names an element.
  const double n = static_cast<double>(values.size());
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * n));
  rank = std::clamp<std::size_t>(rank, 1, values.size());
  return values[rank - 1];
}

std::optional<double> mean(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

namespace {

std::optional<double> in_ms(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  return *seconds * 1000.0;
}

}  // namespace

load_summary summarize(const std::vector<request_sample>& samples, double wall_s) {
  load_summary s;
  s.requests = samples.size();
  s.wall_s = wall_s;
  std::vector<double> ttft, gaps, rates;
  for (const auto& r : samples) {
    if (!r.ok) {
      if (s.failures++ == 0) {
        s.first_status = r.status;
        s.first_error = r.error;
      }
      continue;
    }
    s.generated_tokens += r.generated_tokens;
    s.prompt_tokens += r.prompt_tokens;
    if (r.reused_tokens) s.reused_tokens = s.reused_tokens.value_or(0) + *r.reused_tokens;
    if (r.ttft_s) ttft.push_back(*r.ttft_s);
    gaps.insert(gaps.end(), r.gaps_s.begin(), r.gaps_s.end());
    if (r.decode_tok_s) rates.push_back(*r.decode_tok_s);
  }
  s.aggregate_tok_s = wall_s > 0 ? static_cast<double>(s.generated_tokens) / wall_s : 0.0;
  s.mean_request_tok_s = mean(rates);
  s.ttft_p50_ms = in_ms(percentile(ttft, 50));
  s.ttft_p99_ms = in_ms(percentile(ttft, 99));
  s.itl_p50_ms = in_ms(percentile(gaps, 50));
  s.itl_p99_ms = in_ms(percentile(gaps, 99));
  return s;
}

}  // namespace tandem::client
