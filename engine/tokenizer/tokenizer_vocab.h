// The tokenizer's vocabulary as GGUF stores it (llama.cpp's tokenizer.ggml.* keys), independent
// of where it came from: a GGUF file, or a Hugging Face tokenizer.json being converted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

// llama.cpp's token types (tokenizer.ggml.token_type values).
enum class token_type : int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,       // special tokens: matched in text only when the caller asks (parse_special)
  user_defined = 4,  // added tokens that are not special: always matched in text
  unused = 5,
  byte = 6,
};

struct tokenizer_vocab {
  std::string model = "gpt2";          // tokenizer.ggml.model; only byte-level BPE is supported
  std::string pre;                     // tokenizer.ggml.pre: qwen2, qwen35, llama-bpe, smollm
  std::vector<std::string> tokens;     // byte-level strings for normal tokens, raw text otherwise
  std::vector<token_type> types;       // same length as tokens
  std::vector<std::string> merges;     // "left right", highest priority first
  int32_t bos_id = -1;                 // -1: none
  int32_t eos_id = -1;
  int32_t eot_id = -1;                 // tokenizer.ggml.eot_token_id (end of turn), if any
  int32_t pad_id = -1;
  bool add_bos = false;                // tokenizer.ggml.add_bos_token
  std::string chat_template;           // tokenizer.chat_template (Jinja source), may be empty
};

}  // namespace tandem
