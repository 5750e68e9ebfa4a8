// GET /v1/models, GET /health and GET /metrics: one tandemd request each, answered as OpenAI's
// model list, as a liveness check that fails (503) when tandemd does not answer in time, and as
// tandemd's Prometheus text followed by tandem-http's own (which also answers without tandemd).
#pragma once

#include <boost/asio/io_context.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "daemon_link.h"
#include "http_metrics.h"
#include "response_sink.h"

namespace tandem::http {

// Seconds /health waits for tandemd's hello reply.
inline constexpr double health_wait_seconds = 2.0;

void serve_models(daemon_link& link, std::shared_ptr<response_sink> sink, std::int64_t created);

void serve_health(boost::asio::io_context& io, daemon_link& link, std::shared_ptr<response_sink> sink);

// Always 200: tandemd's text (its metrics op) when it answers within health_wait_seconds, then
// tandem-http's families with tandem_daemon_up 1 or 0.
void serve_metrics(boost::asio::io_context& io, daemon_link& link, std::shared_ptr<response_sink> sink,
                   const http_metrics& metrics, std::size_t open_connections);

}  // namespace tandem::http
