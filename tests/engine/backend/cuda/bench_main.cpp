// A stand-alone `tandem-cuda-bench` with just the bench command, so the CUDA benchmark builds and
// runs before (and independently of) its wiring into tandem-model.
#include <CLI/CLI.hpp>

#include "bench_cmd.h"

int main(int argc, char** argv) {
  CLI::App app{"tandem-cuda-bench: tandem-model's bench command on its own", "tandem-cuda-bench"};
  app.require_subcommand(1);
  tandem::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}
