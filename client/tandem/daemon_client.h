// daemon_client: one blocking connection to tandemd speaking tandem-protocol(7). Requests are JSON
// values packed to msgpack; framing and reply decoding reuse the daemon's protocol library.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "failure.h"
#include "protocol/frame.h"

namespace tandem::client {

class daemon_client {
 public:
  // Connects to the Unix socket at `path`; failures say why in words a user can act on.
  static outcome<daemon_client> connect(const std::string& path);

  daemon_client(daemon_client&& o) noexcept;
  daemon_client& operator=(daemon_client&&) = delete;
  daemon_client(const daemon_client&) = delete;
  ~daemon_client();

  // A fresh request id for this connection.
  std::uint64_t next_id() { return ++last_id_; }

  // Sends one request map (which must already carry its id).
  std::optional<failure> send(const nlohmann::json& request);

  // The next reply map from the daemon. With `watch_interrupt`, Ctrl-C ends the wait with
  // exit_status::interrupted; a negative timeout waits forever, else timing out is a protocol
  // failure. An error reply whose id is nil (forbidden, bad_frame) is returned as a failure.
  outcome<nlohmann::json> receive(bool watch_interrupt = false, int timeout_ms = -1);

  // Sends `request` (an id is added) and waits for its final reply: the result map, or the
  // reply's error as a failure "CODE: message" with the matching exit status.
  outcome<nlohmann::json> call(nlohmann::json request);

 private:
  explicit daemon_client(int fd);
  std::optional<failure> read_some(bool watch_interrupt, int timeout_ms);

  int fd_ = -1;
  proto::frame_decoder decoder_;
  std::uint64_t last_id_ = 0;
};

// Converts an error reply's {code, message} into a failure with the matching exit status.
failure reply_failure(const nlohmann::json& reply);

}  // namespace tandem::client
