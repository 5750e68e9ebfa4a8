// poll() on stdin and the Ctrl-C pipe, read() into a buffer, split at newlines.
#include "line_reader.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "interrupt.h"

namespace tandem::client {

line_reader::status line_reader::next(std::string& line) {
  for (;;) {
    if (const auto nl = buf_.find('\n'); nl != std::string::npos) {
      line.assign(buf_, 0, nl);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      buf_.erase(0, nl + 1);
      return status::line;
    }
    if (eof_) {
      if (buf_.empty()) return status::eof;
      line = std::move(buf_);
      buf_.clear();
      return status::line;
    }
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {interrupt_fd(), POLLIN, 0}};
    const nfds_t n = interrupt_fd() >= 0 ? 2 : 1;
    if (poll(fds, n, -1) < 0) {
      if (errno == EINTR) continue;
      error_ = std::string("poll: ") + std::strerror(errno);
      return status::error;
    }
    if (n == 2 && (fds[1].revents & POLLIN) && take_interrupt()) {
      buf_.clear();  // what was typed before Ctrl-C is discarded, as a shell does
      return status::interrupted;
    }
    char chunk[4096];
    const auto got = read(STDIN_FILENO, chunk, sizeof chunk);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      error_ = std::string("reading stdin: ") + std::strerror(errno);
      return status::error;
    }
    if (got == 0) eof_ = true;
    else buf_.append(chunk, static_cast<std::size_t>(got));
  }
}

}  // namespace tandem::client
