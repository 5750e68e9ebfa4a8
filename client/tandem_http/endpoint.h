// The URLs tandem-http serves, and which method each takes.
#pragma once

#include <ostream>  // Boost 1.74's verb.hpp uses std::ostream without including it

#include <boost/beast/http/verb.hpp>

#include <string_view>

namespace tandem::http {

enum class endpoint { chat_completions, completions, models, health, metrics, unknown };

// The endpoint of a request target (a query string is ignored); `method_ok` says whether the
// method fits it (POST for completions, GET for the others).
endpoint route(boost::beast::http::verb method, std::string_view target, bool& method_ok);

// Whether the endpoint needs the bearer token: all but /health, which probes use. /metrics needs
// it: it names the models and shows the load (Prometheus sends it: authorization.credentials_file).
inline bool needs_token(endpoint e) { return e != endpoint::health; }

// The endpoint's path for metrics labels; "other" for unknown.
std::string_view endpoint_label(endpoint e);

}  // namespace tandem::http
