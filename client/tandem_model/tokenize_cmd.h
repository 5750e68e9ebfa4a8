// tandem-model tokenize / detokenize: run a GGUF file's tokenizer on stdin.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem {

// Adds `tokenize --model FILE.gguf [--special] [--bos]` (stdin text -> JSON array of ids) and
// `detokenize --model FILE.gguf [--skip-special]` (stdin JSON array of ids -> text).
void add_tokenize_commands(CLI::App& app);

}  // namespace tandem
