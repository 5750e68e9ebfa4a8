// The CLI's side of libtandem-client: connecting, and the library's errors as tandem(1)'s
// failures with their exit statuses.
#pragma once

#include <string>

#include "failure.h"
#include "tandem/client.h"

namespace tandem::client {

// Connects to tandemd's socket; a failure is no_daemon (usage for an impossible path).
outcome<connection> connect_to_daemon(const std::string& socket_path);

// A library error as a failure: daemon errors "CODE: message" with the code's status, a broken
// or garbled connection protocol, Ctrl-C interrupted.
failure to_failure(const error& e);

// A library result as an outcome.
template <class T>
outcome<T> to_outcome(result<T> r) {
  if (!r.ok()) return to_failure(r.err());
  return std::move(*r);
}

}  // namespace tandem::client
