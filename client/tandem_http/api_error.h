// OpenAI-style errors: every refused HTTP request is answered with one JSON body of this shape
// ({"error": {message, type, param, code}}) and a matching status, so that OpenAI clients raise
// their usual exception classes with a readable message.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace tandem::http {

struct api_error {
  unsigned status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};

// {"error": {...}}
nlohmann::json error_body(const api_error& e);

// 400 invalid_request_error naming the offending field.
api_error invalid_request(std::string message, std::string param = {}, std::string code = {});

// 404 model_not_found for `model`, as OpenAI answers an unknown model.
api_error model_not_found(const std::string& model);

// Error codes tandem-http uses for the daemon link itself (not tandem-protocol(7) codes).
inline constexpr const char* link_unavailable = "unavailable";  // tandemd cannot be reached
inline constexpr const char* link_too_large = "too_large";      // the request exceeds tandemd's max-frame

// The HTTP error for an error reply {code, message} of tandemd (tandem-protocol(7)) or of the link.
api_error from_daemon_error(const std::string& code, const std::string& message, const std::string& model);

// The same, from a reply map's "error" value (tolerates a malformed one).
api_error from_daemon_reply(const nlohmann::json& reply, const std::string& model);

}  // namespace tandem::http
