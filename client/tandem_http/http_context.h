// What every HTTP connection shares: the options, the daemon link, the log, the metrics, and the
// source of reply ids. Owned by main() for the life of the server; passed down, never global.
#pragma once

#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <random>
#include <string>

#include "daemon_link.h"
#include "http_metrics.h"
#include "logger.h"
#include "options.h"

namespace tandem::http {

class connection_manager;

struct http_context {
  boost::asio::io_context& io;
  const http_options& options;
  daemon_link& link;
  const logger& log;
  connection_manager& connections;
  http_metrics& metrics;
  std::int64_t started = 0;  // Unix seconds; /v1/models' "created"
  std::mt19937_64 rng{std::random_device{}()};

  // "chatcmpl-" + 24 hex digits: unique enough for clients that key on it.
  std::string reply_id(const char* prefix);
};

}  // namespace tandem::http
