// connection_manager: owns the open connections so that shutdown can cancel and close them all,
// and holds the client limits: connections in all and per uid, the bytes of partly received
// frames over all connections, and the frame and idle timeouts (tandemd.conf(5)).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace tandem::daemon {

class connection;

struct connection_limits {
  std::uint32_t max_connections = 256;
  std::uint32_t max_per_user = 64;
  double frame_timeout = 30;  // seconds; 0: none
  double idle_timeout = 0;    // seconds; 0: none
  std::uint64_t max_buffered = 256ull << 20;
};

class connection_manager {
 public:
  using clock = std::chrono::steady_clock;

  explicit connection_manager(connection_limits limits = {}) : limits_(limits) {}
  void set_limits(const connection_limits& l) { limits_ = l; }
  const connection_limits& limits() const { return limits_; }

  // Why a new connection of this uid is refused (a limit reached), or nothing.
  std::optional<std::string> refusal(uid_t uid) const;
  void start(std::shared_ptr<connection> c);
  void stop(const std::shared_ptr<connection>& c);
  void stop_all();
  void cancel_all();  // cancels every in-flight request, keeps the sockets open
  std::size_t size() const { return connections_.size(); }
  std::size_t in_flight() const;

  // A connection's partly received bytes went from `before` to `after`; false when the total
  // over all connections passes max_buffered (the caller refuses that connection; the charge
  // stays until it reports its bytes gone).
  bool charge_buffered(std::size_t before, std::size_t after);
  std::uint64_t buffered() const { return buffered_; }
  // Closes the connections past the frame or idle timeout (the 200 ms housekeeping tick).
  void sweep(clock::time_point now);

 private:
  connection_limits limits_;
  std::set<std::shared_ptr<connection>> connections_;
  std::map<uid_t, std::uint32_t> per_user_;
  std::uint64_t buffered_ = 0;
};

}  // namespace tandem::daemon
