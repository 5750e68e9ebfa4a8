// The protocol is a few environment variables and fcntl/getsockopt calls, so tandem-http does it
// by hand instead of linking libsystemd for sd_listen_fds (tandemd's daemon/systemd/sd_glue.cpp
// uses libsystemd, but only for AF_UNIX and one socket; this front takes TCP and several).
#include "socket_activation.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace tandem::http {

namespace {

// A whole decimal number, nothing around it; nullopt otherwise (also on overflow).
template <typename T>
std::optional<T> whole_number(std::string_view text) {
  T v{};
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

std::string fd_name(int fd) { return "fd " + std::to_string(fd) + " passed by socket activation"; }

}  // namespace

activation_env parse_activation_env(const char* listen_pid, const char* listen_fds, long self) {
  activation_env env;
  if (listen_pid == nullptr) return env;
  const auto pid = whole_number<long>(listen_pid);
  if (!pid || *pid <= 0) {
    env.error = "LISTEN_PID='" + std::string(listen_pid) + "' is not a process id";
    return env;
  }
  // Variables inherited from a parent that was activated itself: not for us.
  if (*pid != self || listen_fds == nullptr) return env;
  const auto n = whole_number<int>(listen_fds);
  if (!n || *n <= 0) {
    env.error = "LISTEN_FDS='" + std::string(listen_fds) + "' is not a count of sockets (1 or more)";
    return env;
  }
  if (*n > activation_max_sockets) {
    env.error = "LISTEN_FDS=" + std::to_string(*n) + ": more than " + std::to_string(activation_max_sockets) +
                " listening sockets";
    return env;
  }
  env.count = *n;
  return env;
}

std::optional<listen_address> inspect_listening_socket(int fd, int& family, std::string& why) {
  int type = 0, listening = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    why = fd_name(fd) + (errno == ENOTSOCK ? " is not a socket" : std::string(" is unusable: ") + std::strerror(errno));
    return std::nullopt;
  }
  len = sizeof listening;
  if (type != SOCK_STREAM || getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) {
    // Accept=yes passes one connected socket per connection; tandem-http accepts by itself.
    why = fd_name(fd) + " is not a listening stream socket (the socket unit needs ListenStream= and Accept=no)";
    return std::nullopt;
  }
  sockaddr_storage ss{};
  len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    why = fd_name(fd) + ": getsockname: " + std::strerror(errno);
    return std::nullopt;
  }
  listen_address a;
  char text[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);  // cannot fail: the buffer fits any address
    a.host = text;
    a.port = ntohs(in->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text);
    a.host = text;
    a.port = ntohs(in6->sin6_port);
  } else if (ss.ss_family == AF_UNIX) {
    const auto* un = reinterpret_cast<const sockaddr_un*>(&ss);
    const std::size_t n = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
    std::string path(un->sun_path, n);
    if (!path.empty() && path[0] == '\0') path[0] = '@';  // abstract namespace
    a.type = listen_address::kind::unix_path;
    a.path = path.substr(0, path.find('\0'));
  } else {
    why = fd_name(fd) + " is of address family " + std::to_string(ss.ss_family) + ", not TCP or Unix";
    return std::nullopt;
  }
  family = ss.ss_family;
  return a;
}

activation_result take_activated_sockets() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  // Copies: unsetenv invalidates what getenv returned.
  const std::string pid_s = pid ? pid : "", fds_s = fds ? fds : "";
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  const auto env = parse_activation_env(pid ? pid_s.c_str() : nullptr, fds ? fds_s.c_str() : nullptr, ::getpid());
  activation_result r;
  r.error = env.error;
  for (int fd = activation_first_fd; r.error.empty() && fd < activation_first_fd + env.count; ++fd) {
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags < 0 || ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) {
      r.error = fd_name(fd) + " is not open";
      break;
    }
    std::string why;
    int family = 0;
    auto addr = inspect_listening_socket(fd, family, why);
    if (!addr) {
      r.error = why;
      break;
    }
    r.sockets.push_back({fd, family, std::move(*addr)});
  }
  if (!r.error.empty()) r.sockets.clear();
  return r;
}

}  // namespace tandem::http
