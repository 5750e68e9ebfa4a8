// Embedded byte-level vocabulary. Byte tokens take ids 0..255 in GPT-2's order (printable bytes
// first, as in GPT-2 and Qwen vocabularies); merges and specials follow; padding fills the rest.
#include "byte_vocab.h"

#include <array>

#include "gguf/gguf_writer.h"

namespace tandem {
namespace {

constexpr int32_t k_normal = 1, k_control = 3, k_user = 4, k_unused = 5;

// Merges of byte-unicode symbols ("Ġ" is the space byte); each result becomes a token.
constexpr std::array<const char*, 8> k_merges = {"Ġ t", "h e", "i n", "e r",
                                                  "Ġ a", "o n", "r e", "Ġt he"};

struct special {
  const char* text;
  int32_t type;
};
constexpr std::array<special, 5> k_specials = {{{"<|endoftext|>", k_control},
                                                {"<|im_start|>", k_control},
                                                {"<|im_end|>", k_control},
                                                {"<think>", k_user},
                                                {"</think>", k_user}}};

// A minimal ChatML template (messages, then the assistant prompt when asked).
constexpr const char* k_chat_template =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

// GPT-2 keeps '!'..'~', '¡'..'¬' and '®'..'ÿ' as themselves; the other bytes map to 256+k in order.
bool printable(uint32_t b) { return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae; }

}  // namespace

std::string byte_token_text(uint8_t b) {
  if (printable(b)) return utf8(b);
  uint32_t k = 0;
  for (uint32_t x = 0; x < b; ++x)
    if (!printable(x)) ++k;
  return utf8(256 + k);
}

uint32_t byte_vocab_min_size() {
  return static_cast<uint32_t>(256 + k_merges.size() + k_specials.size());
}

result<byte_vocab> make_byte_vocab(uint32_t n_vocab) {
  if (n_vocab < byte_vocab_min_size())
    return make_error("the embedded vocabulary needs at least ", byte_vocab_min_size(),
                      " tokens, but the model has n_vocab ", n_vocab);
  byte_vocab v;
  for (uint32_t b = 0; b < 256; ++b)
    if (printable(b)) v.tokens.push_back(byte_token_text(static_cast<uint8_t>(b)));
  for (uint32_t b = 0; b < 256; ++b)
    if (!printable(b)) v.tokens.push_back(byte_token_text(static_cast<uint8_t>(b)));
  v.token_types.assign(256, k_normal);
  for (const char* m : k_merges) {
    std::string merged(m);
    merged.erase(merged.find(' '), 1);
    v.tokens.push_back(merged);
    v.token_types.push_back(k_normal);
    v.merges.emplace_back(m);
  }
  for (const auto& s : k_specials) {
    if (std::string_view(s.text) == "<|endoftext|>") v.bos_id = v.pad_id = static_cast<uint32_t>(v.tokens.size());
    if (std::string_view(s.text) == "<|im_end|>") v.eos_id = static_cast<uint32_t>(v.tokens.size());
    v.tokens.emplace_back(s.text);
    v.token_types.push_back(s.type);
  }
  // llama.cpp's converter names unused ids "[PAD<id>]" and marks them unused.
  while (v.tokens.size() < n_vocab) {
    v.tokens.push_back("[PAD" + std::to_string(v.tokens.size()) + "]");
    v.token_types.push_back(k_unused);
  }
  return v;
}

void write_byte_vocab(const byte_vocab& v, gguf_writer& out) {
  out.set_string("tokenizer.ggml.model", "gpt2");
  out.set_string("tokenizer.ggml.pre", "qwen2");
  out.set("tokenizer.ggml.tokens", gguf_string_array(v.tokens));
  out.set("tokenizer.ggml.token_type", gguf_i32_array(v.token_types));
  out.set("tokenizer.ggml.merges", gguf_string_array(v.merges));
  out.set_u32("tokenizer.ggml.bos_token_id", v.bos_id);
  out.set_u32("tokenizer.ggml.eos_token_id", v.eos_id);
  out.set_u32("tokenizer.ggml.padding_token_id", v.pad_id);
  out.set_bool("tokenizer.ggml.add_bos_token", false);
  out.set_string("tokenizer.chat_template", k_chat_template);
}

}  // namespace tandem
