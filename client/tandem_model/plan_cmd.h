// `tandem-model plan`: the memory plan of a model on a list of devices (bytes per device by
// category, whether it fits and why not). Exit status 0: fits; 3: does not fit; 2: bad usage.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem {

constexpr int k_plan_does_not_fit = 3;

void add_plan_command(CLI::App& app);

}  // namespace tandem
