// exposition_writer: the Prometheus text exposition format, version 0.0.4 — "# HELP" and "# TYPE"
// once per family, before its samples; samples as name{label="value"} number.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "metrics/histogram.h"

namespace tandem::metrics {

// The Content-Type a scraper expects for this text.
inline constexpr std::string_view exposition_content_type = "text/plain; version=0.0.4; charset=utf-8";

enum class metric_type { counter, gauge, histogram };

using label_set = std::vector<std::pair<std::string, std::string>>;

class exposition_writer {
 public:
  // Starts a family. Names are program constants ([a-zA-Z_:][a-zA-Z0-9_:]*, asserted); a
  // counter's name ends in _total.
  void family(std::string_view name, std::string_view help, metric_type type);
  void sample(std::string_view name, const label_set& labels, double value);
  void sample(std::string_view name, const label_set& labels, std::uint64_t value);
  // name_bucket{...,le="b"} for every bound and +Inf (cumulative), then name_sum and name_count.
  void histogram(std::string_view name, const label_set& labels, const histogram_snapshot& s);

  // A family with one unlabelled sample.
  void gauge(std::string_view name, std::string_view help, double value);

  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void series(std::string_view name, const label_set& labels, const std::pair<std::string, std::string>* extra);

  std::string out_;
};

bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);  // also refuses the reserved "__" prefix

// A sample value: integers exactly, others in the shortest form that reads back the same,
// +Inf, -Inf and NaN as Prometheus spells them.
std::string format_value(double v);
// A label value inside its quotes: backslash, double quote and newline escaped.
std::string escape_label_value(std::string_view v);

}  // namespace tandem::metrics
