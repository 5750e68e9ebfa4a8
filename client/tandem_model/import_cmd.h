// `tandem-model import DIR -o FILE.gguf [--type T]`: converts a Hugging Face model directory
// (config.json, *.safetensors, optionally tokenizer.json) to GGUF.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem {

void add_import_command(CLI::App& app);

}  // namespace tandem
