// Where `tandem run` gets its model and prompt: arguments, -m/--model, and piped stdin.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "failure.h"

namespace tandem::client {

struct prompt_source {
  std::string model;  // empty: the daemon's default alias
  std::string prompt;
};

// True when stdin is a pipe, a regular file or a socket: something piped in, not a terminal or
// /dev/null, so reading it cannot wait for a person to type.
bool stdin_is_piped();

// Reads all of stdin; one trailing newline is dropped.
outcome<std::string> read_all_stdin();

// Resolves `run`'s positional arguments (see tandem(1)):
//   MODEL PROMPT          both given;
//   PROMPT                nothing piped;
//   MODEL  < text         one valid alias plus piped text: the text is the prompt;
//   INSTRUCTION < text    one argument that is no alias name (or -m given): INSTRUCTION, a blank line, text;
//   < text                no argument: the piped text is the prompt.
// `stdin_text` is the piped text when stdin_is_piped() (read by the caller), else nullopt.
outcome<prompt_source> resolve_prompt(const std::vector<std::string>& args, const std::string& model_flag,
                                      const std::optional<std::string>& stdin_text);

}  // namespace tandem::client
