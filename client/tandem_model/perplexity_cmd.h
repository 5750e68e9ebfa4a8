// `tandem-model perplexity`: registration of the subcommand (see perplexity_cmd.cpp).
#pragma once

#include <CLI/CLI.hpp>

namespace tandem {

void add_perplexity_command(CLI::App& app);

}  // namespace tandem
