// tandem-model: offline model tools, one subcommand per file. Exit status: 0 ok, 1 failure,
// 2 usage error.
#include "../cli_args.h"
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "bench_cmd.h"
#include "cli_common.h"
#include "import_cmd.h"
#include "logits_cmd.h"
#include "perplexity_cmd.h"
#include "plan_cmd.h"
#include "run_cmd.h"
#include "tokenize_cmd.h"

int main(int argc, char** argv) {
  CLI::App app{"tandem-model: offline tools for GGUF models (inspect, make, quantize, convert, run, measure)",
               "tandem-model"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tandem-model 0.1.0");
  tandem::add_info_command(app);
  tandem::add_make_command(app);
  tandem::add_quantize_command(app);
  tandem::add_tokenize_commands(app);
  tandem::add_run_command(app);
  tandem::add_perplexity_command(app);
  tandem::add_logits_command(app);
  tandem::add_import_command(app);
  tandem::add_bench_command(app);
  tandem::add_plan_command(app);
  if (auto bad = tandem::unknown_subcommand(app, argc, argv)) {
    std::fprintf(stderr, "tandem-model: unknown command '%s'; commands: %s\n", bad->c_str(),
                 tandem::subcommand_names(app).c_str());
    return 2;
  }
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
