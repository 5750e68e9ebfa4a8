// socket_channel: the connection's POSIX side. One blocking Unix stream socket with the frame
// decoder, plus a self-pipe that cancel() writes to from any thread or a signal handler, so a
// wait for the daemon can wake up for it (poll on both) without locks or EINTR games.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "protocol/frame.h"
#include "reply_decoder.h"
#include "tandem/client.h"

namespace tandem::client::wire {

using steady = std::chrono::steady_clock;

class socket_channel {
 public:
  // Connects to `path` (error_kind::usage for a path that cannot be a socket address).
  static result<std::unique_ptr<socket_channel>> open(const std::string& path);

  ~socket_channel();
  socket_channel(const socket_channel&) = delete;
  socket_channel& operator=(const socket_channel&) = delete;

  // Writes one whole frame. When the daemon closed the connection it may have said why first
  // (forbidden): that error is returned in preference to the failed write's.
  std::optional<error> send(const std::string& frame);

  // What ended a wait.
  enum class event { reply, wake };

  // Waits for the next whole reply (event::reply, in `out`), for cancel() (event::wake, only with
  // `watch_wake`), or until `deadline` (error_kind::timeout).
  result<event> next(reply& out, std::optional<steady::time_point> deadline, bool watch_wake);

  // The request ids cancel() asked for since the last call (0: "the running one").
  std::vector<std::uint64_t> take_wakes();

  // Async-signal-safe: one write() of 8 bytes, atomic on a pipe.
  void wake(std::uint64_t id) noexcept;

 private:
  socket_channel(int fd, int wake_read, int wake_write);
  std::optional<error> read_some(std::optional<steady::time_point> deadline, bool watch_wake, bool& woke);

  int fd_ = -1;
  int wake_read_ = -1;
  int wake_write_ = -1;
  proto::frame_decoder decoder_{max_reply_frame};
};

}  // namespace tandem::client::wire
