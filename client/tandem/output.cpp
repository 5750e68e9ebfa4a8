// Formatting for people (tables, sizes) and for scripts (JSON lines).
#include "output.h"

#include <algorithm>
#include <cstdio>

namespace tandem::client {

void print_json_line(const nlohmann::json& j) {
  // Replace, not throw, on invalid UTF-8: the daemon promises valid text, but a dump must not abort.
  print_json_text(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void print_json_text(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string human_bytes(std::uint64_t n) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string human_duration(double seconds) {
  char buf[64];
  if (seconds < 10) {
    std::snprintf(buf, sizeof buf, "%.1fs", seconds);
    return buf;
  }
  auto s = static_cast<unsigned long long>(seconds);
  const auto d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;
  s %= 60;
  if (d) std::snprintf(buf, sizeof buf, "%llud %lluh %llum", d, h, m);
  else if (h) std::snprintf(buf, sizeof buf, "%lluh %llum %llus", h, m, s);
  else if (m) std::snprintf(buf, sizeof buf, "%llum %llus", m, s);
  else std::snprintf(buf, sizeof buf, "%llus", s);
  return buf;
}

namespace {

struct decimal_unit {
  double scale;
  const char* name;
};

// The largest unit that keeps the value at 1 or more (bytes below 1 kB).
decimal_unit unit_for(double n) {
  static constexpr decimal_unit units[] = {{1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "kB"}};
  for (const auto& u : units)
    if (n >= u.scale) return u;
  return {1, "B"};
}

std::string in_unit(double n, const decimal_unit& u) {
  char buf[32];
  if (u.scale == 1) std::snprintf(buf, sizeof buf, "%.0f", n);
  else std::snprintf(buf, sizeof buf, "%.1f", n / u.scale);
  return buf;
}

}  // namespace

std::string decimal_bytes(std::uint64_t n) {
  const auto u = unit_for(static_cast<double>(n));
  return in_unit(static_cast<double>(n), u) + " " + u.name;
}

std::string decimal_rate(double bytes_per_second) {
  const double r = bytes_per_second > 0 ? bytes_per_second : 0;
  const auto u = unit_for(r);
  return in_unit(r, u) + " " + u.name + "/s";
}

std::string bytes_of_total(std::uint64_t done, std::uint64_t total) {
  const auto u = unit_for(static_cast<double>(total));
  return in_unit(static_cast<double>(done), u) + " / " + in_unit(static_cast<double>(total), u) + " " + u.name;
}

std::string load_seconds(double seconds) {
  char buf[32];
  if (seconds < 0.1) std::snprintf(buf, sizeof buf, "%.0f ms", seconds * 1e3);
  else if (seconds < 10) std::snprintf(buf, sizeof buf, "%.2f s", seconds);
  else std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  return buf;
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line.append(width[i] - r[i].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace tandem::client
