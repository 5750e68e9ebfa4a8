// systemd integration through libsystemd's sd-daemon API (sd_notify(3), sd_listen_fds(3),
// sd_watchdog_enabled(3)).
#include "systemd/sd_glue.h"

#include <sys/socket.h>

#if TANDEM_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace tandem::daemon {

#if TANDEM_HAVE_SYSTEMD

bool sd_send(const std::string& msg) { return sd_notify(0, msg.c_str()) > 0; }

std::optional<int> sd_activated_socket(std::string& error) {
  const int n = sd_listen_fds(1);
  if (n < 0) {
    error = "sd_listen_fds failed";
    return std::nullopt;
  }
  if (n == 0) return std::nullopt;
  if (n > 1) {
    error = "socket activation passed " + std::to_string(n) + " sockets; tandemd takes exactly one";
    return std::nullopt;
  }
  const int fd = SD_LISTEN_FDS_START;
  if (sd_is_socket_unix(fd, SOCK_STREAM, 1, nullptr, 0) <= 0) {
    error = "the activated socket is not a listening AF_UNIX stream socket";
    return std::nullopt;
  }
  return fd;
}

std::optional<std::chrono::microseconds> sd_watchdog_interval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) return std::chrono::microseconds(usec);
  return std::nullopt;
}

#else

bool sd_send(const std::string&) { return false; }
std::optional<int> sd_activated_socket(std::string&) { return std::nullopt; }
std::optional<std::chrono::microseconds> sd_watchdog_interval() { return std::nullopt; }

#endif

}  // namespace tandem::daemon
