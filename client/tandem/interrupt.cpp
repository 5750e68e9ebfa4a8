// SIGINT → self-pipe. The handler only write()s one byte (async-signal-safe).
#include "interrupt.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

namespace tandem::client {
namespace {

int pipe_fds[2] = {-1, -1};

extern "C" void on_sigint(int) {
  const int saved = errno;
  const char b = 1;
  // A full pipe already says "interrupted": a failed write loses nothing.
  [[maybe_unused]] auto n = write(pipe_fds[1], &b, 1);
  errno = saved;
}

}  // namespace

void install_interrupt_handler() {
  if (pipe_fds[0] >= 0) return;
  if (pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0) return;  // Ctrl-C then just kills us
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // the pipe, not EINTR, reports the interrupt
  sigaction(SIGINT, &sa, nullptr);
}

int interrupt_fd() { return pipe_fds[0]; }

bool take_interrupt() {
  if (pipe_fds[0] < 0) return false;
  bool any = false;
  char buf[64];
  while (read(pipe_fds[0], buf, sizeof buf) > 0) any = true;
  return any;
}

}  // namespace tandem::client
