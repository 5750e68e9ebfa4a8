// Ctrl-C handling for the client: SIGINT is turned into a readable pipe so that a blocking wait on
// the daemon socket can also wake up for it (poll on both), without races or EINTR games.
#pragma once

namespace tandem::client {

// Installs the SIGINT handler (idempotent). Until then Ctrl-C kills the process as usual.
void install_interrupt_handler();

// The read end of the self-pipe; readable once Ctrl-C was pressed and not yet consumed. -1 before
// install_interrupt_handler().
int interrupt_fd();

// True when Ctrl-C was pressed since the last call; consumes the pending notifications.
bool take_interrupt();

}  // namespace tandem::client
