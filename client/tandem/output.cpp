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
