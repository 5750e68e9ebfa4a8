// Pre-tokenizers: split text into the pieces BPE runs on, chosen by tokenizer.ggml.pre. Each is a
// hand-written matcher equivalent to the model's split regex (no std::regex), linear in the input.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "tokenizer/unicode_text.h"

namespace tandem {

enum class pre_type {
  // Qwen2/Qwen3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
  //   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  qwen2,
  // Qwen3.5: as qwen2 with [\p{L}\p{M}]+ for the letter run and \p{M} excluded from punctuation.
  qwen35,
  // Llama 3: as qwen2 with \p{N}{1,3}.
  llama3,
  // SmolLM / StarCoder: every \p{N} isolated, then GPT-2's
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  smollm,
};

// Maps a tokenizer.ggml.pre value ("qwen2", "qwen35", "llama-bpe", "smollm", ...) to a splitter.
result<pre_type> pre_type_from_name(std::string_view name);
std::string_view pre_type_name(pre_type t);  // the canonical GGUF name

// Appends the end index (in code points, exclusive) of each piece of text[begin, end) to ends.
void pre_tokenize(pre_type type, const decoded_text& text, size_t begin, size_t end,
                  std::vector<size_t>& ends);

}  // namespace tandem
