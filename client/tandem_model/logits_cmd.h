// `tandem-model logits`: registration of the subcommand (see logits_cmd.cpp).
#pragma once

#include <CLI/CLI.hpp>

namespace tandem {

void add_logits_command(CLI::App& app);

}  // namespace tandem
