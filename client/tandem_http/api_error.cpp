// Building OpenAI-style error bodies, and the mapping of tandemd's error codes onto HTTP statuses.
#include "api_error.h"

namespace tandem::http {

using json = nlohmann::json;

json error_body(const api_error& e) {
  auto opt = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error", {{"message", e.message}, {"type", e.type}, {"param", opt(e.param)}, {"code", opt(e.code)}}}};
}

api_error invalid_request(std::string message, std::string param, std::string code) {
  return {400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

api_error model_not_found(const std::string& model) {
  return {404, "The model '" + model + "' does not exist (GET /v1/models lists the models tandemd serves)",
          "invalid_request_error", "model", "model_not_found"};
}

api_error from_daemon_error(const std::string& code, const std::string& message, const std::string& model) {
  if (code == "not_found") return model_not_found(model.empty() ? "default" : model);
  if (code == "bad_request") return invalid_request(message);
  // Retryable: OpenAI clients retry 503 with back-off, which is what a full queue wants.
  if (code == "busy") return {503, "tandemd is busy: " + message, "server_error", "", "server_busy"};
  if (code == "shutting_down") return {503, "tandemd is shutting down", "server_error", "", "shutting_down"};
  if (code == link_unavailable) return {503, message, "server_error", "", "daemon_unavailable"};
  if (code == link_too_large) return {413, message, "invalid_request_error", "", "request_too_large"};
  if (code == "forbidden")
    return {503, "tandemd refuses tandem-http's user: " + message, "server_error", "", "daemon_forbidden"};
  // engine_error covers both a prompt longer than the context (the client's doing) and an engine
  // failure (ours); the daemon's message tells them apart.
  if (code == "engine_error" && message.find("context size") != std::string::npos)
    return invalid_request(message, "messages", "context_length_exceeded");
  return {500, "tandemd: " + code + ": " + message, "server_error", "", "internal_error"};
}

api_error from_daemon_reply(const json& reply, const std::string& model) {
  const json* e = reply.contains("error") ? &reply["error"] : nullptr;
  std::string code = "internal", message = "malformed error reply";
  if (e && e->is_object()) {
    if (e->contains("code") && (*e)["code"].is_string()) code = (*e)["code"].get<std::string>();
    if (e->contains("message") && (*e)["message"].is_string()) message = (*e)["message"].get<std::string>();
  }
  return from_daemon_error(code, message, model);
}

}  // namespace tandem::http
