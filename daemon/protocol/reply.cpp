// Reply frame builders.
#include "protocol/reply.h"

#include "protocol/frame.h"

namespace tandem::proto {

std::string pack_frame(const nlohmann::json& reply) {
  std::string body;
  nlohmann::json::to_msgpack(reply, body);
  return encode_frame(body);
}

std::string result_frame(request_id id, nlohmann::json result) {
  return pack_frame({{"id", id}, {"result", std::move(result)}});
}

std::string error_frame(std::optional<request_id> id, const wire_error& e) {
  nlohmann::json reply;
  reply["id"] = id ? nlohmann::json(*id) : nlohmann::json(nullptr);
  reply["error"] = {{"code", std::string(to_string(e.code))}, {"message", e.message}};
  return pack_frame(reply);
}

std::string chunk_frame(request_id id, const std::string& text) {
  return pack_frame({{"id", id}, {"chunk", text}});
}

}  // namespace tandem::proto
