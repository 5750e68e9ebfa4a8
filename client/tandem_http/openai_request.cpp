// The field-by-field translation. Nulls count as absent (clients serialise unset options as null);
// a present field of the wrong type or out of range is a 400 naming that field.
#include "openai_request.h"

#include <optional>

#include "protocol/request.h"

namespace tandem::http {
namespace {

using json = nlohmann::json;

// Thrown inside this file only, turned into the returned api_error by parse_generate.
struct field_error {
  api_error error;
};

[[noreturn]] void fail(std::string message, std::string param) {
  throw field_error{invalid_request(std::move(message), std::move(param))};
}

const json* field(const json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> opt_number(const json& body, const char* key, double lo, double hi) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) fail(std::string("'") + key + "' must be a number", key);
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi))
    fail(std::string("'") + key + "' must be between " + json(lo).dump() + " and " + json(hi).dump(), key);
  return d;
}

// Integers only (8.5 or "8" are refused); values above `hi` are clamped, since they mean "as many
// as allowed", and the context limit ends a generation earlier anyway.
std::optional<std::uint64_t> opt_count(const json& body, const char* key, std::uint64_t hi) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) fail(std::string("'") + key + "' must be an integer", key);
  // nlohmann keeps non-negative integers as unsigned, negative ones as signed.
  const bool positive = v->is_number_unsigned() ? v->get<std::uint64_t>() >= 1 : v->get<std::int64_t>() >= 1;
  if (!positive) fail(std::string("'") + key + "' must be at least 1", key);
  return std::min<std::uint64_t>(v->get<std::uint64_t>(), hi);
}

bool opt_bool(const json& body, const char* key, bool fallback) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(std::string("'") + key + "' must be a boolean", key);
  return v->get<bool>();
}

std::vector<std::string> stop_list(const json& body) {
  const json* v = field(body, "stop");
  std::vector<std::string> out;
  if (!v) return out;
  if (!v->is_string() && !v->is_array()) fail("'stop' must be a string or an array of strings", "stop");
  const json list = v->is_string() ? json::array({*v}) : *v;
  for (const auto& s : list) {
    if (!s.is_string()) fail("'stop' must be a string or an array of strings", "stop");
    auto text = s.get<std::string>();
    if (text.empty()) continue;  // matches nothing; dropping it is what it means
    if (text.size() > max_stop_bytes)
      fail("each 'stop' string may be at most " + std::to_string(max_stop_bytes) + " bytes", "stop");
    out.push_back(std::move(text));
  }
  if (out.size() > max_stop) fail("'stop' may hold at most " + std::to_string(max_stop) + " strings", "stop");
  return out;
}

// "content": a string, null (an assistant turn that only called tools), or text parts.
std::string message_content(const json& m, const std::string& where) {
  const json* c = field(m, "content");
  if (!c) return {};
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) fail(where + ".content must be a string or an array of content parts", where + ".content");
  std::string text;
  for (const auto& part : *c) {
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
        !part["text"].is_string())
      fail(where + ".content: only parts of type 'text' are supported", where + ".content");
    text += part["text"].get<std::string>();
  }
  return text;
}

json chat_messages(const json& body) {
  const json* v = field(body, "messages");
  if (!v) fail("'messages' is required", "messages");
  if (!v->is_array()) fail("'messages' must be an array", "messages");
  if (v->empty()) fail("'messages' must not be empty", "messages");
  if (v->size() > max_messages) fail("'messages' may hold at most " + std::to_string(max_messages) + " messages", "messages");
  json out = json::array();
  for (std::size_t i = 0; i < v->size(); ++i) {
    const auto& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) fail(where + " must be an object", where);
    const json* role = field(m, "role");
    if (!role || !role->is_string()) fail(where + ".role must be a string", where + ".role");
    std::string r = role->get<std::string>();
    if (const std::size_t most = proto::request_limits{}.max_role_len; r.size() > most)
      fail(where + ".role may be at most " + std::to_string(most) + " bytes", where + ".role");
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    out.push_back({{"role", r}, {"content", message_content(m, where)}});
  }
  return out;
}

std::string completion_prompt(const json& body) {
  const json* v = field(body, "prompt");
  if (!v) fail("'prompt' is required", "prompt");
  if (v->is_string()) return v->get<std::string>();
  if (v->is_array() && v->size() == 1 && (*v)[0].is_string()) return (*v)[0].get<std::string>();
  if (v->is_array() && !v->empty() && (*v)[0].is_string())
    fail("only one prompt per request is supported", "prompt");
  if (v->is_array()) fail("'prompt' must be a string (token id prompts are not supported)", "prompt");
  fail("'prompt' must be a string", "prompt");
}

std::string model_name(const json& body) {
  const json* v = field(body, "model");
  if (!v) return {};
  if (!v->is_string()) fail("'model' must be a string", "model");
  auto m = v->get<std::string>();
  // A name tandemd could never hold is unknown, not malformed: the same 404 as any unknown model.
  if (!proto::valid_model_name(m)) throw field_error{model_not_found(m)};
  return m;
}

void sampling(const json& body, api_kind kind, json& req) {
  if (auto n = opt_count(body, "n", 1 << 30); n && *n != 1) fail("only n=1 is supported", "n");
  if (auto n = opt_count(body, "best_of", 1 << 30); n && *n != 1) fail("only best_of=1 is supported", "best_of");
  if (auto v = opt_number(body, "temperature", 0, 2)) req["temperature"] = *v;
  if (auto v = opt_number(body, "top_p", 0, 1)) req["top_p"] = *v;
  // Extensions that llama-server accepts too (the openai package sends them through extra_body).
  if (auto v = opt_count(body, "top_k", max_tokens_limit)) req["top_k"] = *v;
  if (auto v = opt_number(body, "min_p", 0, 1)) req["min_p"] = *v;
  if (auto v = opt_number(body, "repeat_penalty", 0.01, 100)) req["repeat_penalty"] = *v;
  if (const json* s = field(body, "seed")) {
    if (!s->is_number_integer()) fail("'seed' must be an integer", "seed");
    // Any 64-bit integer is a seed; a negative one is reinterpreted, not refused.
    req["seed"] = s->is_number_unsigned() ? s->get<std::uint64_t>() : static_cast<std::uint64_t>(s->get<std::int64_t>());
  }
  std::optional<std::uint64_t> max_tokens;
  if (kind == api_kind::chat) max_tokens = opt_count(body, "max_completion_tokens", max_tokens_limit);
  if (!max_tokens) max_tokens = opt_count(body, "max_tokens", max_tokens_limit);
  // OpenAI's defaults: chat runs to the end (here: a stop or the context limit), the legacy
  // completions endpoint writes 16 tokens.
  req["max_tokens"] = max_tokens.value_or(kind == api_kind::chat ? max_tokens_limit : 16);
  if (auto stops = stop_list(body); !stops.empty()) req["stop"] = stops;
}

}  // namespace

json parse_json_body(std::string_view body, std::string& why) {
  bool too_deep = false;
  // nlohmann's parser is not recursive, but the values it builds are walked recursively later;
  // the callback stops a deeply nested body from ever being kept.
  json::parser_callback_t cb = [&](int depth, json::parse_event_t, json&) {
    if (depth > max_json_depth) too_deep = true;
    return !too_deep;
  };
  json v = json::parse(body.begin(), body.end(), cb, false);
  if (too_deep) {
    why = "the request body nests deeper than " + std::to_string(max_json_depth) + " levels";
    return json(json::value_t::discarded);
  }
  if (v.is_discarded()) why = "the request body is not valid JSON";
  return v;
}

std::variant<generate_call, api_error> parse_generate(api_kind kind, std::string_view body) {
  std::string why;
  json b = parse_json_body(body, why);
  if (b.is_discarded()) return invalid_request(why);
  if (!b.is_object()) return invalid_request("the request body must be a JSON object");
  try {
    generate_call c;
    c.kind = kind;
    c.model = model_name(b);
    c.request = {{"op", "generate"}};
    if (!c.model.empty()) c.request["model"] = c.model;
    if (kind == api_kind::chat) {
      c.request["messages"] = chat_messages(b);
    } else {
      c.request["prompt"] = completion_prompt(b);
      if (opt_bool(b, "echo", false)) c.echo = c.request["prompt"].get<std::string>();
    }
    sampling(b, kind, c.request);
    c.stream = opt_bool(b, "stream", false);
    c.request["stream"] = c.stream;
    if (const json* so = field(b, "stream_options")) {
      if (!so->is_object()) fail("'stream_options' must be an object", "stream_options");
      c.include_usage = opt_bool(*so, "include_usage", false);
    }
    return c;
  } catch (const field_error& e) {
    return e.error;
  } catch (const json::exception& e) {
    // Not expected (the checks above come first); still a 400, never a crash.
    return invalid_request(std::string("bad request: ") + e.what());
  }
}

}  // namespace tandem::http
