// The subcommands of tandem(1). Each add_* registers its CLI11 subcommand; when that subcommand
// is on the command line, parsing leaves the function that runs it in `act` (main calls it
// after parsing, so a failing command is never mistaken for a usage error).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace tandem::client {

struct global_options {
  std::string socket;  // --socket, else $TANDEM_SOCKET, else tandemd's default
  bool json = false;   // --json: machine-readable output, one JSON object per line
};

using action = std::function<int()>;

void add_run_command(CLI::App& app, const global_options& g, action& act);
void add_chat_command(CLI::App& app, const global_options& g, action& act);
// loadgen: concurrent streamed generations, timed.
void add_loadgen_command(CLI::App& app, const global_options& g, action& act);
// ps, models, status, load, unload, swap, tokenize.
void add_admin_commands(CLI::App& app, const global_options& g, action& act);

}  // namespace tandem::client
