// Moves a tokenizer_vocab in and out of GGUF metadata under llama.cpp's keys
// (tokenizer.ggml.model/pre/tokens/token_type/merges/*_token_id/add_bos_token,
// tokenizer.chat_template).
#pragma once

#include "core/result.h"
#include "tokenizer/tokenizer_vocab.h"

namespace tandem {

class gguf_file;
class gguf_writer;

// Errors name the missing or mistyped key. Optional keys (ids, merges, template) may be absent.
result<tokenizer_vocab> vocab_from_gguf(const gguf_file& file);

// Writes every key above; absent ids (-1) and an empty template are left out.
void write_vocab(gguf_writer& writer, const tokenizer_vocab& vocab);

}  // namespace tandem
