// Binding the Unix socket: umask around bind so the file is born with at most the final mode,
// then chown to the group and chmod to the exact mode.
#include "server/listen_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "server/peer_policy.h"

namespace tandem::daemon {

result<mode_t> parse_mode(const std::string& octal) {
  unsigned v = 0;
  auto [p, ec] = std::from_chars(octal.data(), octal.data() + octal.size(), v, 8);
  if (ec != std::errc() || p != octal.data() + octal.size() || v > 0777)
    return make_error("socket mode '", octal, "' is not an octal mode like 0660");
  if (v & 0007) return make_error("socket mode '", octal, "' gives access to all users; use the group instead");
  return static_cast<mode_t>(v);
}

namespace {
// True when something accepts connections at `path`.
bool socket_is_live(const sockaddr_un& addr) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool live = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return live;
}
}  // namespace

result<listen_socket> bind_listen_socket(const listen_options& opt) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (opt.path.empty() || opt.path.size() >= sizeof addr.sun_path)
    return make_error("socket path '", opt.path, "' is empty or longer than ", sizeof addr.sun_path - 1, " bytes");
  std::memcpy(addr.sun_path, opt.path.c_str(), opt.path.size() + 1);

  listen_socket ls;
  ls.path = opt.path;
  ls.gid = getegid();
  if (!opt.group.empty()) {
    auto g = resolve_group(opt.group);
    if (!g) return make_error("socket group: ", g.message());
    ls.gid = *g;
  }

  struct stat st{};
  if (lstat(opt.path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return make_error(opt.path, " exists and is not a socket; refusing to remove it");
    if (socket_is_live(addr)) return make_error(opt.path, ": another tandemd is already listening there");
    unlink(opt.path.c_str());
  }

  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_error("socket(): ", std::strerror(errno));
  // umask is process-wide: this runs at startup before any other thread exists.
  const mode_t old = umask(0777 & ~opt.mode);
  const int rc = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  const int bind_errno = errno;
  umask(old);
  if (rc != 0) {
    close(fd);
    return make_error("bind ", opt.path, ": ", std::strerror(bind_errno));
  }
  if (chown(opt.path.c_str(), static_cast<uid_t>(-1), ls.gid) != 0 || chmod(opt.path.c_str(), opt.mode) != 0) {
    const int e = errno;
    close(fd);
    unlink(opt.path.c_str());
    return make_error("setting group/mode of ", opt.path, ": ", std::strerror(e));
  }
  if (listen(fd, SOMAXCONN) != 0) {
    const int e = errno;
    close(fd);
    unlink(opt.path.c_str());
    return make_error("listen ", opt.path, ": ", std::strerror(e));
  }
  ls.fd = fd;
  return ls;
}

}  // namespace tandem::daemon
