// response_sink: what a request handler needs of its HTTP connection — one whole JSON reply, or
// a stream of server-sent events. The connection implements it; a handler never sees sockets.
#pragma once

#include <ostream>  // Boost 1.74's status.hpp uses std::ostream without including it

#include <boost/beast/http/status.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "api_error.h"

namespace tandem::http {

class response_sink {
 public:
  virtual ~response_sink() = default;

  // A complete reply; ends the request.
  virtual void send_json(boost::beast::http::status status, const nlohmann::json& body) = 0;
  // A complete reply that is not JSON (/metrics' text).
  virtual void send_text(boost::beast::http::status status, std::string_view content_type, std::string body) = 0;

  // 200 with Content-Type text/event-stream; then events, then end_events() ends the request.
  virtual void begin_events() = 0;
  virtual void send_event(std::string_view event) = 0;  // whole "data: …\n\n" text
  virtual void end_events() = 0;

  void send_error(const api_error& e) { send_json(static_cast<boost::beast::http::status>(e.status), error_body(e)); }
};

}  // namespace tandem::http
