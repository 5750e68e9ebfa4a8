// GET /v1/models and GET /health: one tandemd request each, answered as OpenAI's model list and
// as a liveness check that fails (503) when tandemd does not answer in time.
#pragma once

#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <memory>

#include "daemon_link.h"
#include "response_sink.h"

namespace tandem::http {

// Seconds /health waits for tandemd's hello reply.
inline constexpr double health_wait_seconds = 2.0;

void serve_models(daemon_link& link, std::shared_ptr<response_sink> sink, std::int64_t created);

void serve_health(boost::asio::io_context& io, daemon_link& link, std::shared_ptr<response_sink> sink);

}  // namespace tandem::http
