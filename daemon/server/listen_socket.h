// The listening socket: taken from socket activation, or bound at the configured path with the
// configured group and mode and never, even briefly, wider permissions.
#pragma once

#include <sys/types.h>

#include <string>

#include "core/result.h"

namespace tandem::daemon {

struct listen_options {
  std::string path;
  std::string group;  // empty: keep the daemon's group
  mode_t mode = 0660;
};

struct listen_socket {
  int fd = -1;
  bool activated = false;  // from systemd: not ours to unlink
  gid_t gid = 0;           // the group allowed by default
  std::string path;
};

// Binds a new socket. A stale socket file (nobody accepting) is replaced; a live one is an error.
result<listen_socket> bind_listen_socket(const listen_options& opt);

result<mode_t> parse_mode(const std::string& octal);

}  // namespace tandem::daemon
