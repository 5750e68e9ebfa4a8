// Failure reporting and GGUF writing shared by the subcommands.
#include "cli_common.h"

#include <cstdio>

#include "gguf/gguf_writer.h"
#include "progress.h"

namespace tandem {

void fail(const std::string& message) {
  std::fprintf(stderr, "tandem-model: error: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

void write_with_progress(const gguf_writer& w, const std::string& path, const std::string& verb, bool quiet) {
  progress bar(verb + " " + path, quiet);
  status st = w.write(path, [&bar](size_t i, size_t n, uint64_t b, uint64_t total) {
    bar.update(i, n, b, total);
  });
  if (!st) fail(st.message());
  bar.finish();
}

}  // namespace tandem
