// Blocking POSIX socket I/O for the client; poll() also watches the Ctrl-C pipe.
#include "daemon_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "interrupt.h"
#include "protocol/reply.h"

namespace tandem::client {
namespace {

// Replies may be larger than requests (a tokenized 16 MiB prompt); the daemon is trusted more
// than its peers are, but a cap still turns a corrupt length into an error instead of an OOM.
constexpr std::uint32_t max_reply_frame = 256u << 20;

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

}  // namespace

failure reply_failure(const nlohmann::json& reply) {
  const auto& e = reply.at("error");
  const std::string code = e.is_object() && e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>()
                                                                                       : "internal";
  const std::string msg =
      e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>() : "";
  return failure{status_for_code(code), code + ": " + msg};
}

outcome<daemon_client> daemon_client::connect(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return failure{exit_status::usage, "socket path '" + path + "' is empty or longer than " +
                                           std::to_string(sizeof addr.sun_path - 1) + " bytes"};
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return failure{exit_status::no_daemon, std::string("socket: ") + std::strerror(errno)};
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    close(fd);
    return failure{exit_status::no_daemon, "cannot connect to " + path + ": " + connect_hint(err)};
  }
  return daemon_client(fd);
}

daemon_client::daemon_client(int fd) : fd_(fd), decoder_(max_reply_frame) {}

daemon_client::daemon_client(daemon_client&& o) noexcept
    : fd_(o.fd_), decoder_(std::move(o.decoder_)), last_id_(o.last_id_) {
  o.fd_ = -1;
}

daemon_client::~daemon_client() {
  if (fd_ >= 0) close(fd_);
}

std::optional<failure> daemon_client::send(const nlohmann::json& request) {
  const std::string frame = proto::pack_frame(request);
  std::size_t done = 0;
  while (done < frame.size()) {
    // MSG_NOSIGNAL: a daemon that went away is an error to report, not a SIGPIPE death.
    const auto n = ::send(fd_, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      // The daemon may have said why before closing (forbidden): prefer its words.
      auto why = receive(false, 1000);
      if (!why.ok() && why.fail().status != exit_status::protocol) return why.fail();
      return failure{exit_status::protocol, std::string("sending to tandemd: ") + std::strerror(err)};
    }
    done += static_cast<std::size_t>(n);
  }
  return std::nullopt;
}

std::optional<failure> daemon_client::read_some(bool watch_interrupt, int timeout_ms) {
  pollfd fds[2] = {{fd_, POLLIN, 0}, {interrupt_fd(), POLLIN, 0}};
  const nfds_t n = watch_interrupt && interrupt_fd() >= 0 ? 2 : 1;
  for (;;) {
    const int r = poll(fds, n, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return failure{exit_status::protocol, std::string("poll: ") + std::strerror(errno)};
    if (r == 0) return failure{exit_status::protocol, "tandemd did not answer in time"};
    break;
  }
  if (n == 2 && (fds[1].revents & POLLIN) && take_interrupt())
    return failure{exit_status::interrupted, "interrupted"};
  char buf[65536];
  ssize_t got;
  do got = read(fd_, buf, sizeof buf);
  while (got < 0 && errno == EINTR);
  if (got < 0) return failure{exit_status::protocol, std::string("reading from tandemd: ") + std::strerror(errno)};
  if (got == 0) return failure{exit_status::protocol, "tandemd closed the connection"};
  decoder_.feed(std::string_view(buf, static_cast<std::size_t>(got)));
  return std::nullopt;
}

outcome<nlohmann::json> daemon_client::receive(bool watch_interrupt, int timeout_ms) {
  std::string body;
  for (;;) {
    const auto st = decoder_.next(body);
    if (st == proto::frame_decoder::state::failed)
      return failure{exit_status::protocol, "bad reply frame: " + decoder_.error_message()};
    if (st == proto::frame_decoder::state::frame) break;
    if (auto f = read_some(watch_interrupt, timeout_ms)) return *f;
  }
  auto reply = nlohmann::json::from_msgpack(body, true, false);
  if (reply.is_discarded() || !reply.is_object() || !reply.contains("id"))
    return failure{exit_status::protocol, "tandemd sent a reply that is not a map with an id"};
  if (reply["id"].is_null() && reply.contains("error")) return reply_failure(reply);
  return reply;
}

outcome<nlohmann::json> daemon_client::call(nlohmann::json request) {
  const auto id = next_id();
  request["id"] = id;
  if (auto f = send(request)) return *f;
  for (;;) {
    auto r = receive();
    if (!r.ok()) return r.fail();
    auto& reply = *r;
    if (reply["id"] != id) continue;  // a stray chunk of some other request
    if (reply.contains("error")) return reply_failure(reply);
    if (reply.contains("result") && reply["result"].is_object()) return std::move(reply["result"]);
    if (!reply.contains("chunk")) return failure{exit_status::protocol, "reply without result or error"};
  }
}

}  // namespace tandem::client
