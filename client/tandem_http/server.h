// server: accepts HTTP connections on the --listen address, or on the sockets systemd passed
// (socket activation), and starts a connection for each; past --max-connections a client gets
// one 503 and is closed. stop() ends accepting and lets the connections finish their replies.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "http_context.h"
#include "listen_address.h"
#include "socket_activation.h"

namespace tandem::http {

class server {
 public:
  explicit server(http_context& ctx);

  // Starts accepting on `inherited` (socket activation) or, when it is empty, binds --listen
  // first; the error text, empty on success.
  std::string listen(const std::vector<inherited_socket>& inherited);

  // Stops accepting, asks connections to finish, then calls `done` when none is left (or after
  // `grace_seconds`, whichever comes first).
  void stop(double grace_seconds, std::function<void()> done);

 private:
  // One listening socket; its own retry timer, so that one failing socket does not pause another.
  struct listener {
    listener(boost::asio::io_context& io, listen_address a, bool passed)
        : sock(io), retry(io), address(std::move(a)), inherited(passed) {}
    acceptor sock;
    boost::asio::steady_timer retry;
    listen_address address;
    bool inherited;  // systemd's: it owns the Unix socket file, so stop() leaves that in place
  };

  void accept_next(listener& l);
  void refuse_busy(boost::asio::generic::stream_protocol::socket s);
  void wait_for_connections();

  http_context& ctx_;
  std::vector<std::unique_ptr<listener>> listeners_;
  boost::asio::steady_timer stop_timer_;
  boost::asio::steady_timer poll_timer_;
  std::function<void()> done_;
  bool stopping_ = false;
};

}  // namespace tandem::http
