// Requests are built as JSON values and packed to msgpack (nlohmann), as the daemon builds its
// replies; the frame header comes from the daemon's own protocol library.
#include "request_encoder.h"

#include <nlohmann/json.hpp>

#include "protocol/frame.h"

namespace tandem::client::wire {
namespace {

using json = nlohmann::json;

std::string pack(const json& request) {
  std::string body;
  json::to_msgpack(request, body);
  return proto::encode_frame(body);
}

json head(std::uint64_t id, const char* op) { return {{"id", id}, {"op", op}}; }

void put_model(json& j, const std::string& model) {
  if (!model.empty()) j["model"] = model;
}

}  // namespace

std::string encode_hello(std::uint64_t id, const std::string& client_name) {
  json j = head(id, "hello");
  j["client"] = client_name;
  return pack(j);
}

std::string encode_generate(std::uint64_t id, const generate_request& r) {
  json j = head(id, "generate");
  j["stream"] = true;
  put_model(j, r.model);
  if (r.prompt) {
    j["prompt"] = *r.prompt;
  } else {
    json messages = json::array();
    for (const auto& m : r.messages) messages.push_back({{"role", m.role}, {"content", m.content}});
    j["messages"] = std::move(messages);
  }
  if (r.max_tokens) j["max_tokens"] = *r.max_tokens;
  if (r.temperature) j["temperature"] = *r.temperature;
  if (r.top_k) j["top_k"] = *r.top_k;
  if (r.top_p) j["top_p"] = *r.top_p;
  if (r.min_p) j["min_p"] = *r.min_p;
  if (r.repeat_penalty) j["repeat_penalty"] = *r.repeat_penalty;
  if (r.seed) j["seed"] = *r.seed;
  if (!r.stop.empty()) j["stop"] = r.stop;
  return pack(j);
}

std::string encode_cancel(std::uint64_t id, std::uint64_t target) {
  json j = head(id, "cancel");
  j["target"] = target;
  return pack(j);
}

std::string encode_tokenize(std::uint64_t id, const tokenize_request& r) {
  json j = head(id, "tokenize");
  put_model(j, r.model);
  j["text"] = r.text;
  j["add_special"] = r.add_special;
  return pack(j);
}

std::string encode_detokenize(std::uint64_t id, const detokenize_request& r) {
  json j = head(id, "detokenize");
  put_model(j, r.model);
  j["tokens"] = r.tokens;
  return pack(j);
}

std::string encode_models(std::uint64_t id) { return pack(head(id, "models")); }

std::string encode_status(std::uint64_t id) { return pack(head(id, "status")); }

namespace {
// Only the settings given: the daemon fills in the rest from its configuration.
void put_settings(json& j, const model_settings& s) {
  if (s.context) j["context"] = *s.context;
  if (s.kv_type) j["kv_type"] = *s.kv_type;
  if (s.gpus) j["gpus"] = *s.gpus;
  if (s.split) j["split"] = *s.split;
  if (s.ratios) j["ratios"] = *s.ratios;
  if (s.parallel) j["parallel"] = *s.parallel;
  if (s.keep_alive_s) j["keep_alive"] = *s.keep_alive_s;
}
}  // namespace

std::string encode_load(std::uint64_t id, const load_request& r) {
  json j = head(id, "load");
  j["name"] = r.name;
  j["path"] = r.path;
  put_settings(j, r.settings);
  return pack(j);
}

std::string encode_swap(std::uint64_t id, const swap_request& r) {
  json j = head(id, "swap");
  j["name"] = r.name;
  j["path"] = r.path;
  put_settings(j, r.settings);
  return pack(j);
}

std::string encode_unload(std::uint64_t id, const std::string& name) {
  json j = head(id, "unload");
  j["name"] = name;
  return pack(j);
}

}  // namespace tandem::client::wire
