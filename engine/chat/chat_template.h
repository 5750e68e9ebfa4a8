// Chat prompt formats: ChatML (with Qwen3's and Qwen3.5's thinking rules), Llama 3 and raw, rendered in C++
// rather than by a Jinja engine. The format is recognised from tokenizer.chat_template by
// distinctive markers, or chosen by name.
//
// Choices: a model with no template gets `raw`; a template that is not recognised gets ChatML and
// a warning (chat_template::warning, for the caller to log), since ChatML is what most current
// instruction-tuned models speak and a refusal would make the model unusable for chat.
// What is reproduced of the real templates: message roles and contents, a default system prompt
// that a ChatML template inserts when the conversation has none (SmolLM2, Qwen2.5), Qwen3's
// <think> handling (reasoning kept only after the last user turn; enable_thinking=false appends
// an empty think block), Qwen3.5's (contents trimmed, every assistant turn after the last user
// turn carries a think block, the generation prompt opens one when thinking), Llama 3's content
// trimming and BOS. Not reproduced: tool definitions
// and tool calls, Llama 3.1's date preamble (such a template still renders as Llama 3, with a
// warning).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace tandem {

class tokenizer;

enum class chat_format {
  raw,     // message contents concatenated, nothing added
  chatml,  // <|im_start|>role\ncontent<|im_end|>\n
  qwen3,   // ChatML plus Qwen3's <think> rules
  qwen35,  // ChatML plus Qwen3.5's <think> rules
  llama3,  // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
};

struct chat_message {
  std::string role;  // system, user, assistant, tool
  std::string content;
};

struct chat_options {
  bool add_generation_prompt = true;
  // Qwen3: false appends "<think>\n\n</think>\n\n" after the assistant header; true or unset
  // lets the model think (the template's default). Qwen3.5: true appends "<think>\n", false the
  // empty block; unset takes the template's default (chat_template::thinking_by_default).
  std::optional<bool> enable_thinking;
};

struct chat_template {
  chat_format format = chat_format::raw;
  std::string default_system;              // ChatML: used when the first message is not system
  bool always_generation_prompt = false;   // Llama 3 base template appends the header always
  std::string bos_text;                    // Llama 3 starts the prompt with the BOS token's text
  // Qwen3.5: whether the generation prompt opens a think block when enable_thinking is unset (the
  // large models' template thinks by default; the small models' one does not).
  bool thinking_by_default = true;
  std::string warning;                     // non-empty when the source was not fully recognised
};

std::string_view chat_format_name(chat_format f);
// "raw", "chatml", "qwen3", "qwen3.5" (also "qwen35"), "llama3" (also "llama-3"); an unknown name
// is an error listing these.
result<chat_format> chat_format_from_name(std::string_view name);

// Recognises a Jinja template source (see the header comment for the fallback rules).
chat_template detect_chat_template(std::string_view source);

// The template for a model: its tokenizer.chat_template, or the named format when override_name
// is not empty. Fills BOS text from the vocabulary.
result<chat_template> chat_template_for(const tokenizer& tok, std::string_view override_name = {});

// A rendered conversation: the prompt text, and the byte ranges in it that came from the
// messages (roles, contents, reasoning) rather than from the template. Control tokens are only
// the template's: a message whose content reads "<|im_start|>" stays those characters.
struct chat_text {
  std::string text;
  std::vector<std::pair<size_t, size_t>> user_ranges;  // [begin, end), ascending, disjoint

  chat_text& operator+=(std::string_view template_text) {
    text += template_text;
    return *this;
  }
  void user(std::string_view message_text) {
    if (message_text.empty()) return;
    user_ranges.emplace_back(text.size(), text.size() + message_text.size());
    text += message_text;
  }
};

// The prompt text with control tokens written as text, and which parts came from the messages.
// Encode it with encode_chat (not add_bos: the template already wrote BOS where the model wants
// one). Conversations the model's template refuses (Qwen3.5: no user turn, a system turn that is
// not first, an unknown role) are errors.
result<chat_text> render_chat_text(const chat_template& tpl, std::span<const chat_message> messages,
                                   const chat_options& opt = {});
// The text alone (for display).
result<std::string> render_chat(const chat_template& tpl, std::span<const chat_message> messages,
                                const chat_options& opt = {});
// Token ids of a rendered conversation: the template's control tokens as tokens, the messages'
// text as plain text whatever it spells (no injection of <|im_end|> and the like).
result<std::vector<int32_t>> encode_chat(const tokenizer& tok, const chat_text& chat);

// Ids that end a reply: the vocabulary's eos/eot plus the format's end-of-turn tokens that exist
// in the vocabulary (<|im_end|>, <|endoftext|>, <|eot_id|>, <|eom_id|>, <|end_of_text|>).
std::vector<int32_t> chat_stop_tokens(const chat_template& tpl, const tokenizer& tok);

}  // namespace tandem
