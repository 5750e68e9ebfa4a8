// Reply shapes follow OpenAI's API reference; fields OpenAI sends as null (logprobs) are sent so
// that strict clients find them.
#include "openai_reply.h"

namespace tandem::http {
namespace {

using json = nlohmann::json;

json envelope(const generate_call& c, const reply_ids& ids, bool chunk) {
  const char* object = c.kind == api_kind::chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                : "text_completion";
  json j = {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model},
            {"system_fingerprint", nullptr}};
  // With include_usage, OpenAI sends "usage": null on every chunk but the last.
  if (chunk && c.include_usage) j["usage"] = nullptr;
  return j;
}

json stream_choice(const generate_call& c, std::string_view text, const json& finish, bool with_role) {
  if (c.kind == api_kind::completion)
    return {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}};
  json delta = json::object();
  if (with_role) delta["role"] = "assistant";
  if (with_role || !text.empty()) delta["content"] = text;
  return {{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish}};
}

std::uint64_t count(const json& result, const char* key) {
  auto it = result.find(key);
  return it != result.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

}  // namespace

std::string finish_reason(std::string_view r) {
  // context_limit and cancelled both cut the text short, which OpenAI calls "length".
  return r == "stop" ? "stop" : "length";
}

json usage(const json& result) {
  const auto prompt = count(result, "prompt_tokens"), completion = count(result, "generated_tokens");
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", count(result, "reused_tokens")}}}};
}

json full_reply(const generate_call& c, const reply_ids& ids, const json& result) {
  json j = envelope(c, ids, false);
  const std::string text = c.echo + result.value("text", std::string());
  const std::string finish = finish_reason(result.value("finish_reason", std::string("stop")));
  if (c.kind == api_kind::chat)
    j["choices"] = json::array({{{"index", 0},
                                 {"message", {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", finish}}});
  else
    j["choices"] = json::array({{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish}}});
  j["usage"] = usage(result);
  return j;
}

json first_chunk(const generate_call& c, const reply_ids& ids) {
  json j = envelope(c, ids, true);
  j["choices"] = json::array({stream_choice(c, c.echo, nullptr, c.kind == api_kind::chat)});
  return j;
}

json text_chunk(const generate_call& c, const reply_ids& ids, std::string_view text) {
  json j = envelope(c, ids, true);
  j["choices"] = json::array({stream_choice(c, text, nullptr, false)});
  return j;
}

json last_chunk(const generate_call& c, const reply_ids& ids, const json& result) {
  json j = envelope(c, ids, true);
  const std::string finish = finish_reason(result.value("finish_reason", std::string("stop")));
  j["choices"] = json::array({stream_choice(c, "", finish, false)});
  return j;
}

json usage_chunk(const generate_call& c, const reply_ids& ids, const json& result) {
  json j = envelope(c, ids, true);
  j["choices"] = json::array();
  j["usage"] = usage(result);
  return j;
}

std::string dump(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& data) { return "data: " + dump(data) + "\n\n"; }

json model_list(const json& models_result, std::int64_t created) {
  json data = json::array();
  if (models_result.contains("models") && models_result["models"].is_array())
    for (const auto& m : models_result["models"]) {
      if (!m.is_object() || !m.contains("name") || !m["name"].is_string()) continue;
      json entry = {{"id", m["name"]}, {"object", "model"}, {"created", created}, {"owned_by", "tandem"}};
      // Extras beyond OpenAI's four fields; clients ignore what they do not know.
      for (const char* k : {"state", "default", "arch", "n_ctx"})
        if (m.contains(k)) entry[k] = m[k];
      data.push_back(std::move(entry));
    }
  return {{"object", "list"}, {"data", data}};
}

}  // namespace tandem::http
