// Failure reporting shared by the subcommands.
#include "cli_common.h"

#include <cstdio>

namespace tandem {

void fail(const std::string& message) {
  std::fprintf(stderr, "tandem-model: error: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

}  // namespace tandem
