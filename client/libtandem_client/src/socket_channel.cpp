// Blocking socket I/O: poll() on the socket and the wake pipe, then read what is there.
#include "socket_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tandem::client::wire {
namespace {

std::string connect_hint(int err) {
  switch (err) {
    case ENOENT: return "no such socket (is tandemd running? try: systemctl status tandemd)";
    case ECONNREFUSED: return "connection refused (tandemd is not running)";
    case EACCES:
    case EPERM: return "permission denied (is this user in the socket's group, e.g. 'tandem'?)";
    case ENOTSOCK: return "not a socket";
    default: return std::strerror(err);
  }
}

error sys_error(error_kind kind, const std::string& what, int err) {
  return error{kind, "", what + ": " + std::strerror(err), err};
}

// poll()'s timeout for `deadline`: -1 for none, rounded up so that a wait that times out ends
// after the deadline, at least 0.
int poll_timeout(const std::optional<steady::time_point>& deadline) {
  if (!deadline) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - steady::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

}  // namespace

result<std::unique_ptr<socket_channel>> socket_channel::open(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return error{error_kind::usage, "",
                 "socket path '" + path + "' is empty or longer than " + std::to_string(sizeof addr.sun_path - 1) +
                     " bytes",
                 0};
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sys_error(error_kind::connect, "socket", errno);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    ::close(fd);
    return error{error_kind::connect, "", "cannot connect to " + path + ": " + connect_hint(err), err};
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    return sys_error(error_kind::connect, "pipe", err);
  }
  return std::unique_ptr<socket_channel>(new socket_channel(fd, p[0], p[1]));
}

socket_channel::socket_channel(int fd, int wake_read, int wake_write)
    : fd_(fd), wake_read_(wake_read), wake_write_(wake_write) {}

socket_channel::~socket_channel() {
  for (int f : {fd_, wake_read_, wake_write_})
    if (f >= 0) ::close(f);
}

void socket_channel::wake(std::uint64_t id) noexcept {
  const int saved = errno;
  // A full pipe already holds wakes enough: a failed write loses nothing that matters.
  [[maybe_unused]] auto n = ::write(wake_write_, &id, sizeof id);
  errno = saved;
}

std::vector<std::uint64_t> socket_channel::take_wakes() {
  std::vector<std::uint64_t> ids;
  std::uint64_t buf[64];
  ssize_t got;
  // Writes of 8 bytes are atomic on a pipe, so reads return whole ids.
  while ((got = ::read(wake_read_, buf, sizeof buf)) > 0)
    ids.insert(ids.end(), buf, buf + static_cast<std::size_t>(got) / sizeof buf[0]);
  return ids;
}

std::optional<error> socket_channel::send(const std::string& frame) {
  std::size_t done = 0;
  while (done < frame.size()) {
    // MSG_NOSIGNAL: a daemon that went away is an error to report, not a SIGPIPE death.
    const auto n = ::send(fd_, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      reply last;
      auto why = next(last, steady::now() + std::chrono::seconds(1), false);
      if (why.ok() && last.has_error() && !last.id) return daemon_error(last.map);
      return sys_error(error_kind::io, "sending to tandemd", err);
    }
    done += static_cast<std::size_t>(n);
  }
  return std::nullopt;
}

std::optional<error> socket_channel::read_some(std::optional<steady::time_point> deadline, bool watch_wake,
                                               bool& woke) {
  pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
  const nfds_t n = watch_wake ? 2 : 1;
  for (;;) {
    const int r = ::poll(fds, n, poll_timeout(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return sys_error(error_kind::io, "poll", errno);
    if (r == 0) return error{error_kind::timeout, "", "tandemd did not answer in time", 0};
    break;
  }
  if (n == 2 && (fds[1].revents & POLLIN)) {
    woke = true;
    return std::nullopt;
  }
  char buf[65536];
  ssize_t got;
  do got = ::read(fd_, buf, sizeof buf);
  while (got < 0 && errno == EINTR);
  if (got < 0) return sys_error(error_kind::io, "reading from tandemd", errno);
  if (got == 0) return error{error_kind::io, "", "tandemd closed the connection", 0};
  decoder_.feed(std::string_view(buf, static_cast<std::size_t>(got)));
  return std::nullopt;
}

result<socket_channel::event> socket_channel::next(reply& out, std::optional<steady::time_point> deadline,
                                                   bool watch_wake) {
  std::string body;
  for (;;) {
    const auto st = decoder_.next(body);
    if (st == proto::frame_decoder::state::failed)
      return error{error_kind::protocol, "", "bad reply frame: " + decoder_.error_message(), 0};
    if (st == proto::frame_decoder::state::frame) break;
    bool woke = false;
    if (auto e = read_some(deadline, watch_wake, woke)) return *e;
    if (woke) return event::wake;
  }
  auto r = parse_reply(body);
  if (!r.ok()) return r.err();
  out = std::move(*r);
  return event::reply;
}

}  // namespace tandem::client::wire
