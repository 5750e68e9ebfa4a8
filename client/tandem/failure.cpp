// Error code → exit status, and the one place failures are printed.
#include "failure.h"

#include <cstdio>

namespace tandem::client {

exit_status status_for_code(std::string_view code) {
  if (code == "busy" || code == "shutting_down") return exit_status::busy;
  if (code == "not_found") return exit_status::not_found;
  if (code == "load_failed") return exit_status::load_failed;
  if (code == "forbidden") return exit_status::forbidden;
  if (code == "bad_frame") return exit_status::protocol;
  return exit_status::server_error;
}

int report(const failure& f) {
  if (f.status != exit_status::interrupted) std::fprintf(stderr, "tandem: %s\n", f.message.c_str());
  return to_int(f.status);
}

}  // namespace tandem::client
