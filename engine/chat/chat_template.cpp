// Recognition and rendering of the built-in chat formats; each renderer follows the control flow
// of the model family's published Jinja template so the output is byte-identical to HF's
// apply_chat_template for plain role/content conversations.
#include "chat/chat_template.h"

#include <algorithm>
#include <optional>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace tandem {

namespace {

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

// Python's str.isspace set (Jinja's trim is str.strip()): Unicode White_Space plus U+001C..U+001F.
bool py_space(char32_t cp) {
  return (cp >= 0x1C && cp <= 0x1F) || (classify_code_point(cp) & cc_space);
}

std::string py_strip(std::string_view s) {
  decoded_text d;
  if (!decode_utf8(s, d).ok()) return std::string(s);  // contents were validated by the caller
  size_t b = 0, e = d.cps.size();
  while (b < e && py_space(d.cps[b])) ++b;
  while (e > b && py_space(d.cps[e - 1])) --e;
  return std::string(s.substr(d.offsets[b], d.offsets[e] - d.offsets[b]));
}

std::string_view strip_char(std::string_view s, char c, bool left, bool right) {
  while (left && !s.empty() && s.front() == c) s.remove_prefix(1);
  while (right && !s.empty() && s.back() == c) s.remove_suffix(1);
  return s;
}

// A ChatML template's built-in system prompt: the literal text in
// '<|im_start|>system\n<TEXT><|im_end|>' when TEXT is plain (no quotes or Jinja syntax).
std::string find_default_system(std::string_view src) {
  for (std::string_view head : {std::string_view("<|im_start|>system\n"),
                                std::string_view("<|im_start|>system\\n")}) {
    for (size_t at = src.find(head); at != std::string_view::npos; at = src.find(head, at + 1)) {
      const size_t start = at + head.size();
      const size_t end = src.find("<|im_end|>", start);
      if (end == std::string_view::npos) break;
      std::string_view text = src.substr(start, end - start);
      if (text.empty() || text.find_first_of("'\"{}+") != std::string_view::npos) continue;
      std::string out;
      for (size_t i = 0; i < text.size(); ++i) {  // undo the Jinja string escapes used here
        if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == 'n') {
          out += '\n';
          ++i;
        } else {
          out += text[i];
        }
      }
      return out;
    }
  }
  return {};
}

void render_chatml(const chat_template& tpl, std::span<const chat_message> msgs,
                   const chat_options& opt, chat_text& out) {
  if (!tpl.default_system.empty() && !msgs.empty() && msgs[0].role != "system") {
    out += "<|im_start|>system\n" + tpl.default_system + "<|im_end|>\n";  // the template's own text
  }
  for (const chat_message& m : msgs) {
    out += "<|im_start|>";
    out.user(m.role);
    out += "\n";
    out.user(m.content);
    out += "<|im_end|>\n";
  }
  if (opt.add_generation_prompt) out += "<|im_start|>assistant\n";
}

bool is_tool_response(const chat_message& m) {
  std::string_view c = m.content;
  return c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
}

void render_qwen3_assistant(const chat_message& m, bool after_last_query, bool last,
                            chat_text& out) {
  std::string_view content = m.content;
  std::string_view reasoning;
  const size_t close = content.rfind("</think>");
  if (close != std::string_view::npos) {
    // content.split('</think>')[-1].lstrip('\n') and
    // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
    std::string_view first = content.substr(0, content.find("</think>"));
    first = strip_char(first, '\n', false, true);
    const size_t open = first.rfind("<think>");
    if (open != std::string_view::npos) first = first.substr(open + 7);
    reasoning = strip_char(first, '\n', true, false);
    content = strip_char(content.substr(close + 8), '\n', true, false);
  }
  out += "<|im_start|>";
  out.user(m.role);
  out += "\n";
  if (after_last_query && (last || !reasoning.empty())) {
    out += "<think>\n";
    out.user(strip_char(reasoning, '\n', true, true));
    out += "\n</think>\n\n";
    out.user(strip_char(content, '\n', true, false));
  } else {
    out.user(content);
  }
  out += "<|im_end|>\n";
}

void render_qwen3(std::span<const chat_message> msgs, const chat_options& opt, chat_text& out) {
  if (!msgs.empty() && msgs[0].role == "system") {
    out += "<|im_start|>system\n";
    out.user(msgs[0].content);
    out += "<|im_end|>\n";
  }
  // The last user turn that is not a wrapped tool response; reasoning before it is dropped.
  size_t last_query = msgs.empty() ? 0 : msgs.size() - 1;
  for (size_t i = msgs.size(); i-- > 0;) {
    if (msgs[i].role == "user" && !is_tool_response(msgs[i])) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const chat_message& m = msgs[i];
    const bool last = i + 1 == msgs.size();
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      out += "<|im_start|>" + m.role + "\n";  // one of two fixed roles
      out.user(m.content);
      out += "<|im_end|>\n";
    } else if (m.role == "assistant") {
      render_qwen3_assistant(m, i > last_query, last, out);
    } else if (m.role == "tool") {
      if (i == 0 || msgs[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      out.user(m.content);
      out += "\n</tool_response>";
      if (last || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (opt.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (opt.enable_thinking.has_value() && !*opt.enable_thinking) out += "<think>\n\n</think>\n\n";
  }
}

// Qwen3.5's assistant turn (content already trimmed): the reasoning of a "<think>..</think>" in
// the content by the template's split rules; every turn after the last user query gets a think
// block, an empty one when there was no reasoning.
void render_qwen35_assistant(std::string_view content, bool after_last_query, chat_text& out) {
  std::string reasoning;
  if (content.find("</think>") != std::string_view::npos) {
    // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n'), then trimmed
    std::string_view first = strip_char(content.substr(0, content.find("</think>")), '\n', false, true);
    const size_t open = first.rfind("<think>");
    if (open != std::string_view::npos) first = first.substr(open + 7);
    reasoning = py_strip(strip_char(first, '\n', true, false));
    content = strip_char(content.substr(content.rfind("</think>") + 8), '\n', true, false);
  }
  out += "<|im_start|>assistant\n";
  if (after_last_query) {
    out += "<think>\n";
    out.user(reasoning);
    out += "\n</think>\n\n";
  }
  out.user(content);
  out += "<|im_end|>\n";
}

// The last user turn that is not a wrapped tool response (contents trimmed, as the template
// compares them); reasoning before it is dropped.
std::optional<size_t> qwen35_last_query(std::span<const chat_message> msgs) {
  for (size_t i = msgs.size(); i-- > 0;) {
    if (msgs[i].role != "user") continue;
    const std::string c = py_strip(msgs[i].content);
    if (!(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) return i;
  }
  return std::nullopt;
}

// Follows Qwen3.5's chat_template.jinja; where the template raises an exception, so do we.
status render_qwen35(const chat_template& tpl, std::span<const chat_message> msgs, const chat_options& opt,
                     chat_text& out) {
  if (msgs.empty()) return make_error("Qwen3.5 chat template: no messages");
  if (msgs[0].role == "system") {
    out += "<|im_start|>system\n";
    out.user(py_strip(msgs[0].content));
    out += "<|im_end|>\n";
  }
  const std::optional<size_t> last_query = qwen35_last_query(msgs);
  if (!last_query) return make_error("Qwen3.5 chat template: the conversation has no user message");
  for (size_t i = 0; i < msgs.size(); ++i) {
    const chat_message& m = msgs[i];
    const std::string content = py_strip(m.content);
    if (m.role == "system") {
      if (i != 0) return make_error("Qwen3.5 chat template: message ", i, ": a system message must come first");
    } else if (m.role == "user") {
      out += "<|im_start|>user\n";
      out.user(content);
      out += "<|im_end|>\n";
    } else if (m.role == "assistant") {
      render_qwen35_assistant(content, i > *last_query, out);
    } else if (m.role == "tool") {
      // Consecutive tool results share one user turn; a leading one opens none (as in the template).
      if (i > 0 && msgs[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      out.user(content);
      out += "\n</tool_response>";
      if (i + 1 == msgs.size() || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
    } else {
      return make_error("Qwen3.5 chat template: message ", i, " has role '", m.role,
                        "' (system, user, assistant or tool)");
    }
  }
  if (opt.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    out += opt.enable_thinking.value_or(tpl.thinking_by_default) ? "<think>\n" : "<think>\n\n</think>\n\n";
  }
  return {};
}

void render_llama3(const chat_template& tpl, std::span<const chat_message> msgs,
                   const chat_options& opt, chat_text& out) {
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (i == 0) out += tpl.bos_text;
    out += "<|start_header_id|>";
    out.user(msgs[i].role);
    out += "<|end_header_id|>\n\n";
    out.user(py_strip(msgs[i].content));
    out += "<|eot_id|>";
  }
  if (opt.add_generation_prompt || tpl.always_generation_prompt) {
    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  }
}

}  // namespace

std::string_view chat_format_name(chat_format f) {
  switch (f) {
    case chat_format::raw: return "raw";
    case chat_format::chatml: return "chatml";
    case chat_format::qwen3: return "qwen3";
    case chat_format::qwen35: return "qwen3.5";
    case chat_format::llama3: return "llama3";
  }
  return "?";
}

result<chat_format> chat_format_from_name(std::string_view name) {
  if (name == "raw") return chat_format::raw;
  if (name == "chatml") return chat_format::chatml;
  if (name == "qwen3") return chat_format::qwen3;
  if (name == "qwen3.5" || name == "qwen35") return chat_format::qwen35;
  if (name == "llama3" || name == "llama-3") return chat_format::llama3;
  return make_error("unknown chat template '", name, "' (known: raw, chatml, qwen3, qwen3.5, llama3)");
}

chat_template detect_chat_template(std::string_view src) {
  chat_template t;
  if (src.empty()) {
    t.format = chat_format::raw;
  } else if (contains(src, "<|im_start|>")) {
    const bool thinking = contains(src, "enable_thinking") || contains(src, "reasoning_content");
    t.format = thinking ? chat_format::qwen3 : chat_format::chatml;
    // Qwen3.5's template opens the think block itself ({{- '<think>\n' }} in the generation
    // prompt), which Qwen3's never does; its small models' variant only when asked to think.
    if (thinking && contains(src, "enable_thinking") && contains(src, "'<think>\\n'")) {
      t.format = chat_format::qwen35;
      t.thinking_by_default = !contains(src, "enable_thinking is defined and enable_thinking is true");
    }
    if (!thinking) t.default_system = find_default_system(src);
    if (contains(src, "tools")) {
      t.warning = "chat template: tool definitions and tool calls are not rendered";
    }
  } else if (contains(src, "<|start_header_id|>") && contains(src, "<|eot_id|>")) {
    t.format = chat_format::llama3;
    t.always_generation_prompt = !contains(src, "add_generation_prompt");
    if (contains(src, "Cutting Knowledge Date")) {
      t.warning = "chat template: Llama 3.1 system preamble and tools are not rendered";
    }
  } else {
    t.format = chat_format::chatml;
    t.warning = "chat template not recognised; using ChatML";
  }
  return t;
}

result<chat_template> chat_template_for(const tokenizer& tok, std::string_view override_name) {
  chat_template t;
  if (!override_name.empty()) {
    auto f = chat_format_from_name(override_name);
    if (!f) return f.err();
    t.format = *f;
    // A named format over the model's own template keeps the model's default system prompt.
    if (t.format == chat_format::chatml) {
      t.default_system = find_default_system(tok.vocab().chat_template);
    }
  } else {
    t = detect_chat_template(tok.vocab().chat_template);
  }
  if (t.format == chat_format::llama3 && tok.vocab().bos_id >= 0) {
    t.bos_text = std::string(tok.token_bytes(tok.vocab().bos_id));
  }
  return t;
}

result<chat_text> render_chat_text(const chat_template& tpl, std::span<const chat_message> messages,
                                   const chat_options& opt) {
  for (size_t i = 0; i < messages.size(); ++i) {
    TANDEM_TRY(validate_utf8(messages[i].role));
    auto st = validate_utf8(messages[i].content);
    if (!st) return make_error("message ", i, ": ", st.message());
  }
  chat_text out;
  switch (tpl.format) {
    case chat_format::raw:
      for (const chat_message& m : messages) out.user(m.content);
      break;
    case chat_format::chatml:
      render_chatml(tpl, messages, opt, out);
      break;
    case chat_format::qwen3:
      render_qwen3(messages, opt, out);
      break;
    case chat_format::qwen35:
      TANDEM_TRY(render_qwen35(tpl, messages, opt, out));
      break;
    case chat_format::llama3:
      render_llama3(tpl, messages, opt, out);
      break;
  }
  return out;
}

result<std::string> render_chat(const chat_template& tpl, std::span<const chat_message> messages,
                                const chat_options& opt) {
  auto t = render_chat_text(tpl, messages, opt);
  if (!t) return t.err();
  return std::move(t->text);
}

result<std::vector<int32_t>> encode_chat(const tokenizer& tok, const chat_text& chat) {
  encode_options o;
  o.parse_special = true;  // the template's control tokens, and only the template's
  o.plain = chat.user_ranges;
  return tok.encode(chat.text, o);
}

std::vector<int32_t> chat_stop_tokens(const chat_template& tpl, const tokenizer& tok) {
  std::vector<int32_t> ids;
  auto add = [&](int32_t id) {
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  add(tok.vocab().eos_id);
  add(tok.vocab().eot_id);
  std::vector<std::string_view> names;
  if (tpl.format == chat_format::chatml || tpl.format == chat_format::qwen3 || tpl.format == chat_format::qwen35) {
    names = {"<|im_end|>", "<|endoftext|>"};
  } else if (tpl.format == chat_format::llama3) {
    names = {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"};
  }
  for (std::string_view n : names) {
    if (auto id = tok.find_token(n); id && tok.type_of(*id) != token_type::normal) add(*id);
  }
  return ids;
}

}  // namespace tandem
