// Parsers for sizes, device lists, ratios and the split mode.
#include "plan/plan_parse.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <set>

namespace tandem {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_commas(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == ',') {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  return out;
}

// A plain finite decimal number (no sign, no exponent), as the whole of `s`.
bool parse_number(std::string_view s, double& v) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.') return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size() && std::isfinite(v);
}

bool all_digits(std::string_view s) {
  if (s.empty() || s.size() > 6) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace

std::string_view split_mode_name(split_mode m) {
  switch (m) {
    case split_mode::none: return "none";
    case split_mode::layer: return "layer";
    case split_mode::tensor: return "tensor";
  }
  return "?";
}

result<uint64_t> parse_byte_size(std::string_view text) {
  const std::string_view t = trim(text);
  size_t unit_at = 0;
  while (unit_at < t.size() && (std::isdigit(static_cast<unsigned char>(t[unit_at])) || t[unit_at] == '.')) ++unit_at;
  double v = 0;
  if (!parse_number(t.substr(0, unit_at), v))
    return make_error("size '", text, "' is not a number with an optional unit (e.g. 16GiB, 512MiB)");
  const std::string unit = lower(t.substr(unit_at));
  struct named_unit {
    std::string_view name;
    double factor;
  };
  static constexpr named_unit k_units[] = {
      {"", 1},          {"b", 1},          {"k", 0x1p10},     {"kib", 0x1p10}, {"kb", 1e3},
      {"m", 0x1p20},    {"mib", 0x1p20},   {"mb", 1e6},       {"g", 0x1p30},   {"gib", 0x1p30},
      {"gb", 1e9},      {"t", 0x1p40},     {"tib", 0x1p40},   {"tb", 1e12},
  };
  for (const auto& u : k_units) {
    if (unit != u.name) continue;
    const double bytes = std::floor(v * u.factor);
    if (bytes < 1) return make_error("size '", text, "' must be positive");
    if (bytes > 0x1p60) return make_error("size '", text, "' is too large");
    return static_cast<uint64_t>(bytes);
  }
  return make_error("size '", text, "' has an unknown unit '", t.substr(unit_at),
                    "' (use B, KiB, MiB, GiB, TiB, K, M, G, T, KB, MB, GB or TB)");
}

result<std::vector<device_request>> parse_device_list(std::string_view spec) {
  if (trim(spec).empty())
    return make_error("--devices is empty (give CUDA ids like 0,1, sizes like 16GiB,32GiB or GPU models: ",
                      gpu_model_names(), ")");
  std::vector<device_request> out;
  std::set<int> ids;
  for (std::string_view item : split_commas(spec)) {
    device_request r;
    r.text = std::string(item);
    if (item.empty()) return make_error("--devices '", spec, "' has an empty item");
    const size_t eq = item.find('=');
    const std::string_view head = trim(item.substr(0, eq));
    // The cap after '=' (of an id or a model); 0 without one.
    auto cap = [&]() -> result<uint64_t> {
      if (eq == std::string_view::npos) return uint64_t{0};
      auto c = parse_byte_size(item.substr(eq + 1));
      if (!c) return make_error("device '", item, "': cap ", c.message());
      return *c;
    };
    if ((r.gpu = find_gpu_model(head))) {
      auto c = cap();
      if (!c) return c.err();
      r.bytes = *c;
    } else if (eq != std::string_view::npos || (all_digits(head) && head.size() == item.size())) {
      if (!all_digits(head))
        return make_error("device '", item, "': '", head, "' is not a CUDA device id (a number like 0) or a GPU ",
                          "model (", gpu_model_names(), ")");
      r.cuda_id = std::stoi(std::string(head));
      if (!ids.insert(r.cuda_id).second) return make_error("device id ", r.cuda_id, " is listed twice in --devices");
      auto c = cap();
      if (!c) return c.err();
      r.bytes = *c;
    } else {
      auto size = parse_byte_size(item);
      if (!size)
        return make_error("device '", item, "': ", size.message(), "; or a GPU model (", gpu_model_names(), ")");
      r.bytes = *size;
    }
    out.push_back(std::move(r));
  }
  return out;
}

result<std::vector<double>> parse_ratio_list(std::string_view text) {
  std::vector<double> out;
  for (std::string_view item : split_commas(text)) {
    double v = 0;
    if (!parse_number(item, v))
      return make_error("ratio '", item, "' in '", text, "' is not a positive number");
    if (!(v > 0)) return make_error("ratio '", item, "' in '", text, "' must be greater than zero");
    out.push_back(v);
  }
  return out;
}

result<split_mode> parse_split_mode(std::string_view text) {
  const std::string t = lower(trim(text));
  for (split_mode m : {split_mode::none, split_mode::layer, split_mode::tensor})
    if (t == split_mode_name(m)) return m;
  return make_error("unknown split '", text, "' (use none, layer or tensor)");
}

device_spec sized_device(const device_request& r) {
  device_spec d;
  d.cuda_id = -1;
  d.name = r.gpu ? std::string(r.gpu->name) : r.text;
  d.total_bytes = r.gpu ? r.gpu->memory_bytes : r.bytes;
  d.free_bytes = d.total_bytes;
  d.cap_bytes = r.gpu ? r.bytes : 0;
  return d;
}

device_spec measured_device(const device_request& r, const std::string& gpu_name, uint64_t total_bytes,
                            uint64_t free_bytes) {
  device_spec d;
  d.cuda_id = r.cuda_id;
  d.name = "cuda:" + std::to_string(r.cuda_id) + " " + gpu_name;
  d.total_bytes = total_bytes;
  d.free_bytes = free_bytes;
  d.cap_bytes = r.bytes;
  d.context_in_free = true;
  return d;
}

std::string plan_bytes_text(uint64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / 0x1p30);
  else if (bytes >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / 0x1p20);
  else if (bytes >= (1ull << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 0x1p10);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

}  // namespace tandem
