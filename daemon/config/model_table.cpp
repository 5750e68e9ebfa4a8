// [model.NAME] tables: a small reader for the subset of TOML they use (bare or quoted names,
// strings and numbers, comments), so that errors can name the table, the key and the line.
#include "config/model_table.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <istream>
#include <map>
#include <sstream>

#include "plan/plan_parse.h"
#include "protocol/request.h"

namespace tandem::daemon {
namespace {

const std::vector<std::string> table_keys = {"path",    "gpus",       "split",     "ratios",
                                             "context", "kv-type",    "keep-alive", "parallel"};

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool is_bare(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// Thrown inside this file only; take_model_tables turns it into model_tables_read::error.
struct table_error {
  std::string message;
};

// A TOML basic ("...") or literal ('...') string at the start of `s`; `s` is left after it.
std::string read_quoted(std::string_view& s) {
  const char q = s.front();
  std::string out;
  size_t i = 1;
  for (; i < s.size() && s[i] != q; ++i) {
    if (q == '"' && s[i] == '\\' && i + 1 < s.size()) {
      const char e = s[++i];
      if (e == '"' || e == '\\') out += e;
      else if (e == 'n') out += '\n';
      else if (e == 't') out += '\t';
      else throw table_error{std::string("unsupported escape '\\") + e + "' in a string"};
    } else {
      out += s[i];
    }
  }
  if (i == s.size()) throw table_error{"a string is not closed on its line"};
  s.remove_prefix(i + 1);
  return out;
}

// One key's value: a string, or the text of a number.
struct table_value {
  bool is_string = false;
  std::string text;
};

table_value read_value(std::string_view s) {
  table_value v;
  if (!s.empty() && (s.front() == '"' || s.front() == '\'')) {
    v.is_string = true;
    v.text = read_quoted(s);
    s = trim(s);
    if (!s.empty() && s.front() != '#') throw table_error{"unexpected text after the string"};
    return v;
  }
  s = trim(s.substr(0, s.find('#')));
  if (s.empty()) throw table_error{"no value"};
  if (s.front() == '[' || s.front() == '{') throw table_error{"an array or inline table is not expected here"};
  for (char c : s)
    if (c != '_') v.text += c;  // TOML allows 1_000
  return v;
}

std::string quoted(const table_value& v) { return v.is_string ? "\"" + v.text + "\"" : v.text; }

std::string string_of(const table_value& v, const std::string& key) {
  if (!v.is_string) throw table_error{key + " = " + v.text + ": expected a string in quotes"};
  if (v.text.empty()) throw table_error{key + " is empty"};
  return v.text;
}

double number_of(const table_value& v, const std::string& key, double lo, double hi, bool integer) {
  char* end = nullptr;
  const double d = v.is_string ? NAN : std::strtod(v.text.c_str(), &end);
  const bool whole = !v.is_string && end && *end == 0 && std::isfinite(d);
  if (!whole || (integer && (d != std::floor(d) || v.text.find_first_of(".eE") != std::string::npos)))
    throw table_error{key + " = " + quoted(v) + ": expected " + (integer ? "an integer" : "a number")};
  if (d < lo || d > hi) {
    const auto text = [](double x) { return std::to_string(static_cast<long long>(x)); };  // bounds are whole
    throw table_error{key + " = " + v.text + ": must be " + text(lo) + " to " + text(hi)};
  }
  return d;
}

void set_key(model_table& t, const std::string& key, const table_value& v) {
  auto& s = t.settings;
  if (key == "path") {
    t.path = string_of(v, key);
  } else if (key == "gpus") {
    // gpus = 1 reads as the one-device list "1".
    s.gpus = v.is_string ? string_of(v, key) : std::to_string(std::lround(number_of(v, key, 0, 1023, true)));
  } else if (key == "split") {
    s.split = string_of(v, key);
    if (!proto::valid_split(*s.split)) throw table_error{"split = " + quoted(v) + ": must be layer or tensor"};
  } else if (key == "ratios") {
    s.ratios = string_of(v, key);
  } else if (key == "context") {
    s.context = static_cast<std::uint32_t>(number_of(v, key, proto::min_context, proto::max_context, true));
  } else if (key == "kv-type") {
    s.kv_type = string_of(v, key);
    if (!proto::valid_kv_type(*s.kv_type)) throw table_error{"kv-type = " + quoted(v) + ": must be f16, q8_0 or f32"};
  } else if (key == "keep-alive") {
    s.keep_alive_s = number_of(v, key, 0, proto::max_keep_alive_s, false);
  } else if (key == "parallel") {
    s.parallel = static_cast<std::uint32_t>(number_of(v, key, 1, proto::max_parallel, true));
  }
  if (auto e = check_device_fields(s)) throw table_error{*e};
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> d(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) d[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = d[0];
    d[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = d[j];
      d[j] = std::min({d[j] + 1, d[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return d[b.size()];
}

// The name part of a header or key: bare, or quoted. `s` is left after it.
std::string read_name(std::string_view& s) {
  s = trim(s);
  if (!s.empty() && (s.front() == '"' || s.front() == '\'')) return read_quoted(s);
  size_t n = 0;
  while (n < s.size() && is_bare(s[n])) ++n;
  std::string out(s.substr(0, n));
  s.remove_prefix(n);
  return out;
}

// A table header line. nullopt: a header that is not [model.NAME] (CLI11's then); the name for
// ours; an error for [model], [model.a.b] and [[model...]].
std::optional<std::string> model_header(std::string_view line) {
  const bool array = line.substr(0, 2) == "[[";
  std::string_view s = line.substr(array ? 2 : 1);
  if (read_name(s) != "model") return std::nullopt;
  if (array) throw table_error{"arrays of tables ([[model]]) are not supported; write [model.NAME]"};
  s = trim(s);
  if (s.empty() || s.front() != '.') throw table_error{"a model table needs its alias: [model.NAME]"};
  s.remove_prefix(1);
  std::string name = read_name(s);
  s = trim(s);
  if (!s.empty() && s.front() == '.')
    throw table_error{"[model.NAME] takes one name; quote an alias with dots: [model.\"a.b\"]"};
  if (s.empty() || s.front() != ']') throw table_error{"a table header ends with ']'"};
  s = trim(s.substr(1));
  if (!s.empty() && s.front() != '#') throw table_error{"unexpected text after the table header"};
  if (!proto::valid_model_name(name))
    throw table_error{"'" + name + "' is not an alias (1-64 of A-Z a-z 0-9 . _ : -; quote one with . or :)"};
  return name;
}

void read_key_line(model_table& t, std::map<std::string, int>& seen, std::string_view line, int n) {
  const auto eq = line.find('=');
  if (eq == std::string_view::npos) throw table_error{"expected key = value"};
  std::string_view k = line.substr(0, eq);
  std::string key = read_name(k);
  if (!trim(k).empty()) key += std::string(trim(k));  // dotted or odd keys: named as written, then unknown
  if (std::find(table_keys.begin(), table_keys.end(), key) == table_keys.end()) {
    std::string msg = "unknown key '" + key + "'";
    if (auto best = nearest_key(key, table_keys); !best.empty()) msg += "; did you mean '" + best + "'?";
    throw table_error{msg + " (a model table takes path, gpus, split, ratios, context, kv-type, keep-alive, parallel)"};
  }
  if (auto [it, fresh] = seen.emplace(key, n); !fresh)
    throw table_error{"key '" + key + "' given twice (first at line " + std::to_string(it->second) + ")"};
  set_key(t, key, read_value(trim(line.substr(eq + 1))));
}

}  // namespace

std::string nearest_key(const std::string& key, const std::vector<std::string>& keys) {
  std::string best;
  size_t best_d = 3;  // suggest only near misses
  for (const auto& k : keys)
    if (const size_t d = edit_distance(key, k); d < best_d) best = k, best_d = d;
  return best;
}

std::string take_model_tables(std::istream& in, model_tables_read& out) {
  std::string rest, line;
  model_table* current = nullptr;
  std::map<std::string, int> seen;  // keys of the current table
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string_view t = trim(line);
    try {
      if (!t.empty() && t.front() == '[') {
        current = nullptr;
        if (auto name = model_header(t)) {
          for (const auto& prev : out.tables)
            if (prev.name == *name)
              throw table_error{"[model." + *name + "] is given twice (first at line " + std::to_string(prev.line) + ")"};
          out.tables.push_back({*name, n, std::nullopt, {}});
          current = &out.tables.back();
          seen.clear();
          rest += '\n';
          continue;
        }
      } else if (current) {
        if (!t.empty() && t.front() != '#') read_key_line(*current, seen, t, n);
        rest += '\n';
        continue;
      }
    } catch (const table_error& e) {
      out.error_line = n;
      out.error = (current ? "[model." + current->name + "]: " : "") + e.message;
      return rest;
    }
    rest += line + '\n';
  }
  return rest;
}

std::vector<CLI::ConfigItem> model_table_config::from_config(std::istream& in) const {
  *out_ = {};
  std::istringstream rest(take_model_tables(in, *out_));
  auto items = CLI::ConfigTOML::from_config(rest);
  for (const auto& item : items)
    if (item.parents.empty() && item.name == "model")
      for (const auto& v : item.inputs) out_->listed.push_back(v.substr(0, v.find('=')));
  return items;
}

std::optional<std::string> check_gpu_list(const std::string& gpus) {
  auto d = parse_device_list(gpus);
  if (!d) return "gpus '" + gpus + "': " + d.message();
  // The planner's list also takes GPU models and bare sizes (what-if devices); tandemd serves on
  // real ones, so each item must name a CUDA id.
  for (const device_request& r : *d)
    if (r.cuda_id < 0)
      return "gpus '" + gpus + "': '" + r.text + "' is not a CUDA device id (tandemd serves on devices like " +
             "0,1 or 0=16GiB,1=32GiB; GPU models and sizes alone are for tandem-model plan --devices)";
  return std::nullopt;
}

std::optional<std::string> check_device_fields(const proto::model_settings& s) {
  if (s.gpus)
    if (auto e = check_gpu_list(*s.gpus)) return e;
  if (s.ratios)
    if (auto r = parse_ratio_list(*s.ratios); !r) return "ratios '" + *s.ratios + "': " + r.message();
  return std::nullopt;
}

}  // namespace tandem::daemon
