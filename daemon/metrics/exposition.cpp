// exposition_writer: escaping and number formatting of the text format (the rules are those of
// https://prometheus.io/docs/instrumenting/exposition_formats/, version 0.0.4).
#include "metrics/exposition.h"

#include <cassert>
#include <charconv>
#include <cmath>

namespace tandem::metrics {
namespace {

bool name_char(char c, bool first) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return first ? alpha : alpha || (c >= '0' && c <= '9');
}

// HELP text: backslash and newline escaped (quotes stay as they are there).
std::string escape_help(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string_view type_name(metric_type t) {
  switch (t) {
    case metric_type::counter: return "counter";
    case metric_type::gauge: return "gauge";
    case metric_type::histogram: return "histogram";
  }
  return "untyped";
}

}  // namespace

bool valid_metric_name(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (!name_char(name[i], i == 0) && name[i] != ':') return false;
  return true;
}

bool valid_label_name(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__") return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (!name_char(name[i], i == 0)) return false;
  return true;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round trip
  return std::string(buf, r.ptr);
}

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void exposition_writer::family(std::string_view name, std::string_view help, metric_type type) {
  assert(valid_metric_name(name));
  assert(type != metric_type::counter || (name.size() > 6 && name.substr(name.size() - 6) == "_total"));
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += escape_help(help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type_name(type);
  out_ += '\n';
}

void exposition_writer::series(std::string_view name, const label_set& labels,
                               const std::pair<std::string, std::string>* extra) {
  out_ += name;
  if (labels.empty() && !extra) {
    out_ += ' ';
    return;
  }
  char sep = '{';
  auto one = [&](const std::pair<std::string, std::string>& l) {
    assert(valid_label_name(l.first));
    out_ += sep;
    out_ += l.first;
    out_ += "=\"";
    out_ += escape_label_value(l.second);
    out_ += '"';
    sep = ',';
  };
  for (const auto& l : labels) one(l);
  if (extra) one(*extra);
  out_ += "} ";
}

void exposition_writer::sample(std::string_view name, const label_set& labels, double value) {
  series(name, labels, nullptr);
  out_ += format_value(value);
  out_ += '\n';
}

void exposition_writer::sample(std::string_view name, const label_set& labels, std::uint64_t value) {
  series(name, labels, nullptr);
  out_ += std::to_string(value);
  out_ += '\n';
}

void exposition_writer::histogram(std::string_view name, const label_set& labels, const histogram_snapshot& s) {
  const std::string base(name);
  const std::string bucket = base + "_bucket";
  for (std::size_t i = 0; i < s.cumulative.size(); ++i) {
    const std::pair<std::string, std::string> le{"le", i < s.bounds.size() ? format_value(s.bounds[i]) : "+Inf"};
    series(bucket, labels, &le);
    out_ += std::to_string(s.cumulative[i]);
    out_ += '\n';
  }
  sample(base + "_sum", labels, s.sum);
  sample(base + "_count", labels, s.count);
}

void exposition_writer::gauge(std::string_view name, std::string_view help, double value) {
  family(name, help, metric_type::gauge);
  sample(name, {}, value);
}

}  // namespace tandem::metrics
