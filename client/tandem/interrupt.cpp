// SIGINT → self-pipe, or → the routed connection's cancel(). The handler only write()s.
#include "interrupt.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>

namespace tandem::client {
namespace {

int pipe_fds[2] = {-1, -1};
// A lock-free atomic pointer is safe to read in a signal handler.
std::atomic<connection*> routed{nullptr};
static_assert(std::atomic<connection*>::is_always_lock_free);

extern "C" void on_sigint(int) {
  const int saved = errno;
  if (connection* c = routed.load()) {
    c->cancel();
  } else {
    const char b = 1;
    // A full pipe already says "interrupted": a failed write loses nothing.
    [[maybe_unused]] auto n = write(pipe_fds[1], &b, 1);
  }
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

interrupt_route::interrupt_route(connection& c) { routed.store(&c); }

interrupt_route::~interrupt_route() { routed.store(nullptr); }

}  // namespace tandem::client
