// `tandem-model run`: registration of the subcommand (see run_cmd.cpp).
#pragma once

#include <CLI/CLI.hpp>

namespace tandem {

void add_run_command(CLI::App& app);

}  // namespace tandem
