// One line per call, flushed, so that a crash or a kill loses no earlier line.
#include "logger.h"

#include <cstdio>
#include <cstdlib>

namespace tandem::http {
namespace {

const char* word(log_level l) {
  switch (l) {
    case log_level::error: return "error";
    case log_level::warning: return "warning";
    case log_level::info: return "info";
    case log_level::debug: return "debug";
  }
  return "info";
}

}  // namespace

bool parse_log_level(std::string_view name, log_level& out) {
  for (auto l : {log_level::error, log_level::warning, log_level::info, log_level::debug})
    if (name == word(l)) {
      out = l;
      return true;
    }
  return false;
}

logger::logger(log_level level) : level_(level), journal_(std::getenv("JOURNAL_STREAM") != nullptr) {}

void logger::write(log_level l, const std::string& line) const {
  if (journal_)
    std::fprintf(stderr, "<%d>%s\n", static_cast<int>(l), line.c_str());
  else
    std::fprintf(stderr, "tandem-http: %s: %s\n", word(l), line.c_str());
  std::fflush(stderr);
}

}  // namespace tandem::http
