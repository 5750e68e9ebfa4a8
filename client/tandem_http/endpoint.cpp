// Exact paths only: "/v1/chat/completions/" or "/v1//models" are unknown, as they are to OpenAI.
#include "endpoint.h"

namespace tandem::http {

endpoint route(boost::beast::http::verb method, std::string_view target, bool& method_ok) {
  using boost::beast::http::verb;
  const auto q = target.find('?');
  const std::string_view path = target.substr(0, q);
  endpoint e = endpoint::unknown;
  if (path == "/v1/chat/completions") e = endpoint::chat_completions;
  else if (path == "/v1/completions") e = endpoint::completions;
  else if (path == "/v1/models") e = endpoint::models;
  else if (path == "/health" || path == "/v1/health") e = endpoint::health;
  else if (path == "/metrics") e = endpoint::metrics;
  const bool post = e == endpoint::chat_completions || e == endpoint::completions;
  method_ok = post ? method == verb::post : method == verb::get;
  return e;
}

std::string_view endpoint_label(endpoint e) {
  switch (e) {
    case endpoint::chat_completions: return "/v1/chat/completions";
    case endpoint::completions: return "/v1/completions";
    case endpoint::models: return "/v1/models";
    case endpoint::health: return "/health";
    case endpoint::metrics: return "/metrics";
    case endpoint::unknown: break;
  }
  return "other";
}

}  // namespace tandem::http
