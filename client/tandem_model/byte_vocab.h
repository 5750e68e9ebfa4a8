// The small byte-level BPE vocabulary `make` embeds when no tokenizer.json is given: 256 byte tokens
// in GPT-2's byte-to-unicode form, a few merges, ChatML specials, then unused padding up to n_vocab.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"

namespace tandem {

class gguf_writer;

struct byte_vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;  // llama.cpp token types: 1 normal, 3 control, 4 user, 5 unused
  std::vector<std::string> merges;   // "left right", by rank
  uint32_t bos_id = 0;               // <|endoftext|>, as Qwen's converter sets it
  uint32_t eos_id = 0;               // <|im_end|>
  uint32_t pad_id = 0;               // <|endoftext|>
};

// The fewest tokens the vocabulary needs before padding.
uint32_t byte_vocab_min_size();

// Builds the vocabulary padded with "[PAD<id>]" tokens to exactly n_vocab entries.
result<byte_vocab> make_byte_vocab(uint32_t n_vocab);

// Writes the tokenizer.* keys as llama.cpp's converter does for a Qwen2-style BPE model
// (model "gpt2", pre "qwen2"), plus a ChatML chat template.
void write_byte_vocab(const byte_vocab& v, gguf_writer& out);

// GPT-2's byte-to-unicode map: the UTF-8 text of the token that stands for byte b.
std::string byte_token_text(uint8_t b);

}  // namespace tandem
