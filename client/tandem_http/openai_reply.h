// OpenAI reply bodies built from tandemd's generate results and models list: the whole reply of a
// non-streaming request, the chunks of a streaming one, and /v1/models. Pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "openai_request.h"

namespace tandem::http {

// What every chunk of one reply repeats.
struct reply_ids {
  std::string id;        // "chatcmpl-…" or "cmpl-…"
  std::int64_t created;  // Unix seconds
  std::string model;     // the alias served
};

// tandemd's finish_reason (length, stop, context_limit, cancelled) as OpenAI's (stop, length).
std::string finish_reason(std::string_view daemon_reason);

// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details {cached_tokens}}.
nlohmann::json usage(const nlohmann::json& result);

// The non-streaming reply: chat.completion or text_completion.
nlohmann::json full_reply(const generate_call& c, const reply_ids& ids, const nlohmann::json& result);

// Streaming: the first chunk (chat: the assistant role), a text piece, the last chunk with the
// finish reason, and the usage chunk (stream_options.include_usage).
nlohmann::json first_chunk(const generate_call& c, const reply_ids& ids);
nlohmann::json text_chunk(const generate_call& c, const reply_ids& ids, std::string_view text);
nlohmann::json last_chunk(const generate_call& c, const reply_ids& ids, const nlohmann::json& result);
nlohmann::json usage_chunk(const generate_call& c, const reply_ids& ids, const nlohmann::json& result);

// One server-sent event, "data: JSON\n\n".
std::string sse_event(const nlohmann::json& data);
inline constexpr std::string_view sse_done = "data: [DONE]\n\n";

// /v1/models from the daemon's models result.
nlohmann::json model_list(const nlohmann::json& models_result, std::int64_t created);

// JSON text for a reply; invalid UTF-8 (never expected from tandemd) is replaced, not thrown on.
std::string dump(const nlohmann::json& v);

}  // namespace tandem::http
