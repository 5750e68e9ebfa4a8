// tandem-http's command line (tandem-http(8)). Parsing is a function of argv alone, so that the
// usage errors and their exit status are tested without starting a server.
#pragma once

#include <cstdint>
#include <string>

#include "listen_address.h"
#include "logger.h"

namespace tandem::http {

// Exit statuses, as tandemd(8) and tandem-model(1) use them.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;  // a runtime failure: cannot listen
inline constexpr int exit_usage = 2;    // a bad command line or token file

struct http_options {
  listen_address listen;
  bool listen_given = false;  // --listen was on the command line (socket activation overrides it)
  std::string socket;      // tandemd's socket
  std::string token;       // empty: no bearer token required
  std::uint64_t max_body = 1u << 20;
  std::uint32_t max_header = 16u << 10;  // request line and header fields, bytes
  double timeout = 30;                   // seconds to receive a request's header, and again its body
  std::uint32_t max_connections = 256;
  log_level level = log_level::info;
};

struct parse_outcome {
  http_options options;
  bool exit_now = false;  // --help, --version or an error: print `output` and exit
  int exit_code = exit_ok;
  std::string output;
};

parse_outcome parse_options(int argc, const char* const* argv);

}  // namespace tandem::http
