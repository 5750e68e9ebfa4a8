// Line-buffered stderr logging with sd-daemon(3) priority prefixes.
#include "log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace tandem::daemon {
namespace {
std::atomic<int> g_level{static_cast<int>(log_level::info)};
std::mutex g_mu;

bool use_prefix() {
  // journald sets JOURNAL_STREAM for services whose stderr it reads; only it wants the prefixes
  // (a terminal, a pipe or a log file gets plain lines).
  static const bool p = std::getenv("JOURNAL_STREAM") != nullptr;
  return p;
}

const char* word(log_level l) {
  switch (l) {
    case log_level::error: return "error";
    case log_level::warning: return "warning";
    case log_level::notice: return "notice";
    case log_level::info: return "info";
    case log_level::debug: return "debug";
  }
  return "info";
}
}  // namespace

void set_log_level(log_level l) { g_level = static_cast<int>(l); }
bool log_enabled(log_level l) { return static_cast<int>(l) <= g_level.load(); }

bool parse_log_level(std::string_view name, log_level& out) {
  for (auto l : {log_level::error, log_level::warning, log_level::notice, log_level::info, log_level::debug})
    if (name == word(l)) {
      out = l;
      return true;
    }
  return false;
}

void log_line(log_level l, const std::string& msg) {
  std::lock_guard lk(g_mu);
  if (use_prefix())
    std::fprintf(stderr, "<%d>%s\n", static_cast<int>(l), msg.c_str());
  else
    std::fprintf(stderr, "tandemd: %s: %s\n", word(l), msg.c_str());
  std::fflush(stderr);
}

}  // namespace tandem::daemon
