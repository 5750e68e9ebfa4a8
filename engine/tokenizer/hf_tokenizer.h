// Reads a Hugging Face tokenizer.json (+ tokenizer_config.json for the chat template and special
// tokens) into a tokenizer_vocab, for `tandem-model make --tokenizer`. Only the byte-level BPE
// configurations the tokenizer implements are accepted; anything else is an error naming the part.
#pragma once

#include <string>
#include <string_view>

#include "core/result.h"
#include "tokenizer/tokenizer_vocab.h"

namespace tandem {

// config_json may be empty (no tokenizer_config.json): then no template and no special ids.
result<tokenizer_vocab> vocab_from_hf_json(std::string_view tokenizer_json,
                                           std::string_view config_json);

// Reads path (a tokenizer.json) and, if present, tokenizer_config.json in the same directory.
result<tokenizer_vocab> vocab_from_hf_files(const std::string& tokenizer_json_path);

}  // namespace tandem
