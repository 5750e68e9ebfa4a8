// Ctrl-C handling for the client: SIGINT is turned into a readable pipe so that a blocking wait on
// stdin can also wake up for it (poll on both), without races or EINTR games. While a generation
// runs, Ctrl-C goes to that connection's cancel() instead (async-signal-safe by contract).
#pragma once

#include "tandem/client.h"

namespace tandem::client {

// Installs the SIGINT handler (idempotent). Until then Ctrl-C kills the process as usual.
void install_interrupt_handler();

// The read end of the self-pipe; readable once Ctrl-C was pressed and not yet consumed. -1 before
// install_interrupt_handler().
int interrupt_fd();

// True when Ctrl-C was pressed since the last call; consumes the pending notifications.
bool take_interrupt();

// For its lifetime, Ctrl-C cancels the generation running on `c` rather than filling the pipe.
class interrupt_route {
 public:
  explicit interrupt_route(connection& c);
  ~interrupt_route();
  interrupt_route(const interrupt_route&) = delete;
  interrupt_route& operator=(const interrupt_route&) = delete;
};

}  // namespace tandem::client
