// OpenAI request bodies (/v1/chat/completions, /v1/completions) translated into tandemd generate
// requests (tandem-protocol(7)). Pure functions: no I/O, so the whole mapping is unit-tested.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "api_error.h"

namespace tandem::http {

enum class api_kind { chat, completion };

// One generation as tandem-http will run it.
struct generate_call {
  api_kind kind = api_kind::chat;
  nlohmann::json request;     // the generate request without its id: op, prompt or messages, sampling
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the counts
  std::string model;           // as the client named it; empty: tandemd's default alias
  std::string echo;            // /v1/completions with echo=true: the prompt, put before the text
};

// Limits of tandem-protocol(7)'s generate, checked here so that the error names the OpenAI field.
inline constexpr std::uint64_t max_tokens_limit = 1u << 20;
inline constexpr std::size_t max_stop = 16;
inline constexpr std::size_t max_stop_bytes = 256;
inline constexpr std::size_t max_messages = 4096;
// JSON nesting a request may use; OpenAI bodies need 5 or 6 levels.
inline constexpr int max_json_depth = 64;

// Parses `body` as the request of `kind`: the call, or the 400/404 error to answer with. Unknown
// fields are ignored (clients send many OpenAI options tandem has no use for).
std::variant<generate_call, api_error> parse_generate(api_kind kind, std::string_view body);

// Parses a JSON body with a nesting cap; a discarded value on any error (`why` says which).
nlohmann::json parse_json_body(std::string_view body, std::string& why);

}  // namespace tandem::http
