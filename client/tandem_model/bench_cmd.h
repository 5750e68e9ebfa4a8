// `tandem-model bench`: prefill and decode throughput of a GGUF model on the CUDA backend, in a
// llama-bench-like table, each figure also as a fraction of a ceiling measured on the same GPU.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem {

void add_bench_command(CLI::App& app);

}  // namespace tandem
