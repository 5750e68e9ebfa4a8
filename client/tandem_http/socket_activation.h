// systemd socket activation (sd_listen_fds(3) semantics, without libsystemd): the listening
// sockets a service manager passed as fds 3, 4, ... with LISTEN_FDS and LISTEN_PID set.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "listen_address.h"

namespace tandem::http {

// The first passed fd, as SD_LISTEN_FDS_START.
inline constexpr int activation_first_fd = 3;
// More listening sockets than this is a misconfigured unit, not a use case; the bound also keeps
// a garbage LISTEN_FDS from making us touch thousands of fds.
inline constexpr int activation_max_sockets = 16;

// What LISTEN_PID and LISTEN_FDS (nullptr when unset) say for the process `self`: how many
// sockets are ours (0: no activation, or one meant for another process, as sd_listen_fds says),
// or an error for values that do not parse or count nothing (sd_listen_fds returns -EINVAL for
// those too).
struct activation_env {
  int count = 0;
  std::string error;
};
activation_env parse_activation_env(const char* listen_pid, const char* listen_fds, long self);

// The address of a listening stream socket on `fd` (TCP over IPv4/IPv6, or Unix; an abstract
// Unix name is shown as "@name"), or nullopt with `why` when it is not one.
// `family` gets the socket's address family.
std::optional<listen_address> inspect_listening_socket(int fd, int& family, std::string& why);

struct inherited_socket {
  int fd = -1;
  int family = 0;  // AF_INET, AF_INET6 or AF_UNIX
  listen_address address;
};

struct activation_result {
  std::vector<inherited_socket> sockets;  // empty: not socket-activated, bind --listen
  std::string error;                      // activation was meant for us but is unusable
};

// Reads the environment, unsets LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES (whatever they said,
// as sd_listen_fds(1) does, so that no child inherits them), marks the fds close-on-exec and
// checks each one.
activation_result take_activated_sockets();

}  // namespace tandem::http
