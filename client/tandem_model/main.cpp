// tandem-model: offline model tools (info, make, quantize, and the tokenize/run/perplexity/logits/
// import/bench commands when their sources are in the build). Exit status: 0 ok, 1 failure, 2 usage error.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "cli_common.h"

// Commands written in their own files; CMake defines TANDEM_HAVE_<X>_CMD when the file exists.
namespace tandem {
#ifdef TANDEM_HAVE_TOKENIZE_CMD
void add_tokenize_commands(CLI::App& app);
#endif
#ifdef TANDEM_HAVE_RUN_CMD
void add_run_command(CLI::App& app);
#endif
#ifdef TANDEM_HAVE_PERPLEXITY_CMD
void add_perplexity_command(CLI::App& app);
#endif
#ifdef TANDEM_HAVE_LOGITS_CMD
void add_logits_command(CLI::App& app);
#endif
#ifdef TANDEM_HAVE_IMPORT_CMD
void add_import_command(CLI::App& app);
#endif
#ifdef TANDEM_HAVE_BENCH_CMD
void add_bench_command(CLI::App& app);
#endif
}  // namespace tandem

int main(int argc, char** argv) {
  CLI::App app{"tandem-model: offline tools for GGUF models (inspect, make, quantize)",
               "tandem-model"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tandem-model 0.1.0");
  tandem::add_info_command(app);
  tandem::add_make_command(app);
  tandem::add_quantize_command(app);
#ifdef TANDEM_HAVE_TOKENIZE_CMD
  tandem::add_tokenize_commands(app);
#endif
#ifdef TANDEM_HAVE_RUN_CMD
  tandem::add_run_command(app);
#endif
#ifdef TANDEM_HAVE_PERPLEXITY_CMD
  tandem::add_perplexity_command(app);
#endif
#ifdef TANDEM_HAVE_LOGITS_CMD
  tandem::add_logits_command(app);
#endif
#ifdef TANDEM_HAVE_IMPORT_CMD
  tandem::add_import_command(app);
#endif
#ifdef TANDEM_HAVE_BENCH_CMD
  tandem::add_bench_command(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();  // a command failed and has printed its message
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help/--version exit 0; bad usage exits 2
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-model: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
