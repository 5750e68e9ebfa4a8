// systemd integration: sd_notify messages, socket activation and the watchdog interval. Without
// libsystemd at build time these are no-ops and tandemd always binds its own socket.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace tandem::daemon {

// Sends one sd_notify message ("READY=1", "STATUS=..."); false when not under systemd.
bool sd_send(const std::string& msg);

// A listening AF_UNIX stream socket passed by socket activation (LISTEN_FDS), if any. Unsets the
// environment so that children do not inherit it.
std::optional<int> sd_activated_socket(std::string& error);

// The watchdog interval systemd expects pings within (WatchdogSec=), if enabled for us.
std::optional<std::chrono::microseconds> sd_watchdog_interval();

}  // namespace tandem::daemon
