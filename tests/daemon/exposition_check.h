// A reader of the Prometheus text format (0.0.4) for tests: parses a whole text back and reports
// the first rule it breaks, so that a test can check what the writer produced line by line.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "metrics/exposition.h"

namespace tandem::metrics::testing {

struct parsed_sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // unescaped values, in text order
  double value = 0;

  std::string label(const std::string& key) const {
    for (const auto& [k, v] : labels)
      if (k == key) return v;
    return {};
  }
};

struct parsed_family {
  std::string help;
  std::string type;
  std::vector<parsed_sample> samples;
};

struct parsed_text {
  std::map<std::string, parsed_family> families;
  std::string error;  // empty: the text follows every rule checked

  // The value of the sample `name` whose labels include all of `want`; NaN when there is none.
  double value(const std::string& name, const std::map<std::string, std::string>& want = {}) const;
};

namespace detail {

inline double parse_number(const std::string& s, bool& ok) {
  ok = true;
  if (s == "+Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  if (s == "NaN") return NAN;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  ok = !s.empty() && end == s.c_str() + s.size();
  return v;
}

// name{k="v",...} value — labels unescaped; false with `why` on a malformed line.
inline bool parse_sample(const std::string& line, parsed_sample& out, std::string& why) {
  std::size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  out.name = line.substr(0, i);
  if (!valid_metric_name(out.name)) return why = "bad metric name '" + out.name + "'", false;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const auto eq = line.find('=', i);
      if (eq == std::string::npos) return why = "label without '='", false;
      std::string key = line.substr(i, eq - i);
      if (!valid_label_name(key)) return why = "bad label name '" + key + "'", false;
      if (eq + 1 >= line.size() || line[eq + 1] != '"') return why = "label value not quoted", false;
      std::string val;
      std::size_t j = eq + 2;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] != '\\') {
          val += line[j];
          continue;
        }
        if (++j >= line.size()) return why = "escape at the end", false;
        if (line[j] == 'n') val += '\n';
        else if (line[j] == '\\' || line[j] == '"') val += line[j];
        else return why = "unknown escape", false;
      }
      if (j >= line.size()) return why = "unterminated label value", false;
      out.labels.emplace_back(std::move(key), std::move(val));
      i = j + 1;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return why = "unterminated label set", false;
    ++i;
  }
  if (i >= line.size() || line[i] != ' ') return why = "no space before the value", false;
  bool ok = false;
  out.value = parse_number(line.substr(i + 1), ok);
  if (!ok) return why = "bad value '" + line.substr(i + 1) + "'", false;
  return true;
}

// The family a sample belongs to: its own name, or a histogram's base name.
inline std::string family_of(const std::string& name, const std::map<std::string, parsed_family>& fams) {
  if (fams.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      auto base = name.substr(0, name.size() - s.size());
      auto it = fams.find(base);
      if (it != fams.end() && it->second.type == "histogram") return base;
    }
  }
  return {};
}

// Buckets of each series ascending in le, counts never decreasing, +Inf last and equal to _count.
inline std::string check_histogram(const std::string& name, const parsed_family& f) {
  std::map<std::string, std::vector<const parsed_sample*>> buckets;  // by the labels without le
  std::map<std::string, double> counts;
  auto key_of = [](const parsed_sample& s) {
    std::string k;
    for (const auto& [a, b] : s.labels)
      if (a != "le") k += a + "=" + b + ";";
    return k;
  };
  for (const auto& s : f.samples) {
    if (s.name == name + "_bucket") buckets[key_of(s)].push_back(&s);
    if (s.name == name + "_count") counts[key_of(s)] = s.value;
  }
  for (const auto& [key, list] : buckets) {
    double last_le = -INFINITY, last_count = 0;
    for (const auto* b : list) {
      bool ok = false;
      const double le = parse_number(b->label("le"), ok);
      if (!ok || !(le > last_le)) return name + ": bucket bounds not ascending";
      if (b->value < last_count) return name + ": bucket counts decrease";
      last_le = le;
      last_count = b->value;
    }
    if (!std::isinf(last_le)) return name + ": the last bucket is not +Inf";
    if (!counts.count(key) || counts[key] != last_count) return name + ": +Inf bucket differs from _count";
  }
  return {};
}

}  // namespace detail

inline parsed_text parse_exposition(const std::string& text) {
  parsed_text out;
  std::set<std::string> sampled;  // families whose samples have begun
  std::string current;            // the family of the last sample: a family's lines stay together
  std::istringstream in(text);
  std::string line;
  int n = 0;
  auto fail = [&](const std::string& why) {
    out.error = "line " + std::to_string(n) + ": " + why + ": " + line;
    return out;
  };
  if (!text.empty() && text.back() != '\n') {
    out.error = "the text does not end with a newline";
    return out;
  }
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) return fail("empty line");
    if (line[0] == '#') {
      std::istringstream ls(line);
      std::string hash, kind, name, rest;
      ls >> hash >> kind >> name;
      std::getline(ls, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kind != "HELP" && kind != "TYPE") continue;  // another comment
      if (!valid_metric_name(name)) return fail("bad name");
      auto& f = out.families[name];
      if (sampled.count(name)) return fail(kind + " after the family's samples");
      if (kind == "HELP") {
        if (!f.help.empty()) return fail("second HELP");
        f.help = rest;
      } else {
        if (!f.type.empty()) return fail("second TYPE");
        if (rest != "counter" && rest != "gauge" && rest != "histogram") return fail("unknown type");
        if (rest == "counter" && (name.size() < 6 || name.substr(name.size() - 6) != "_total"))
          return fail("a counter's name does not end in _total");
        f.type = rest;
      }
      continue;
    }
    parsed_sample s;
    std::string why;
    if (!detail::parse_sample(line, s, why)) return fail(why);
    const auto fam = detail::family_of(s.name, out.families);
    if (fam.empty() || out.families[fam].type.empty()) return fail("sample before its family's TYPE");
    if (out.families[fam].help.empty()) return fail("sample before its family's HELP");
    if (fam != current && sampled.count(fam)) return fail("the family's samples are not together");
    current = fam;
    sampled.insert(fam);
    out.families[fam].samples.push_back(std::move(s));
  }
  for (const auto& [name, f] : out.families) {
    if (f.type == "histogram")
      if (auto e = detail::check_histogram(name, f); !e.empty()) {
      out.error = e;
      return out;
    }
  }
  return out;
}

inline double parsed_text::value(const std::string& name, const std::map<std::string, std::string>& want) const {
  for (const auto& [fname, f] : families)
    for (const auto& s : f.samples) {
      if (s.name != name) continue;
      bool all = true;
      for (const auto& [k, v] : want) all = all && s.label(k) == v;
      if (all) return s.value;
    }
  return NAN;
}

}  // namespace tandem::metrics::testing
