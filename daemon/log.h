// Logging to stderr. Under systemd (JOURNAL_STREAM set) each line starts with an sd-daemon
// "<N>" priority prefix so that journald records the level; on a terminal a word is used instead.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace tandem::daemon {

enum class log_level { error = 3, warning = 4, notice = 5, info = 6, debug = 7 };

// Lines above this level are dropped. Thread safe.
void set_log_level(log_level l);
bool parse_log_level(std::string_view name, log_level& out);
void log_line(log_level l, const std::string& msg);
bool log_enabled(log_level l);

template <class... Parts>
void log(log_level l, const Parts&... parts) {
  if (!log_enabled(l)) return;
  std::ostringstream os;
  (os << ... << parts);
  log_line(l, os.str());
}

}  // namespace tandem::daemon
