// tandem-http's log: lines on stderr, with sd-daemon "<N>" priority prefixes under journald (as
// tandemd writes them). An object handed to whoever logs, not global state.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace tandem::http {

enum class log_level { error = 3, warning = 4, info = 6, debug = 7 };

bool parse_log_level(std::string_view name, log_level& out);

class logger {
 public:
  explicit logger(log_level level);

  bool enabled(log_level l) const { return static_cast<int>(l) <= static_cast<int>(level_); }

  template <class... Parts>
  void log(log_level l, const Parts&... parts) const {
    if (!enabled(l)) return;
    std::ostringstream os;
    (os << ... << parts);
    write(l, os.str());
  }

 private:
  void write(log_level l, const std::string& line) const;

  log_level level_;
  bool journal_;  // JOURNAL_STREAM set: journald reads stderr and wants the prefixes
};

}  // namespace tandem::http
