// Shared plumbing for tandem-model subcommands: how a command reports a failure so that main()
// exits with status 1 after one clear message, writing a GGUF file, and the command registration
// functions.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace tandem {

// Prints "tandem-model: error: <message>" to stderr and ends the command with exit status 1
// (by throwing CLI::RuntimeError, which main() turns into the status without printing more).
[[noreturn]] void fail(const std::string& message);

class gguf_writer;
// Writes w to path with a progress bar labelled "<verb> <path>" (none when quiet); fail()s on an error.
void write_with_progress(const gguf_writer& w, const std::string& path, const std::string& verb, bool quiet);

void add_info_command(CLI::App& app);
void add_make_command(CLI::App& app);
void add_quantize_command(CLI::App& app);

}  // namespace tandem
