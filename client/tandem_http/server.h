// server: accepts HTTP connections on the --listen address and starts a connection for each;
// past --max-connections a client gets one 503 and is closed. stop() ends accepting and lets
// the connections finish their replies.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <functional>
#include <string>

#include "http_context.h"
#include "listen_address.h"

namespace tandem::http {

class server {
 public:
  explicit server(http_context& ctx);

  // Binds and starts accepting; the error text, empty on success.
  std::string listen();

  // Stops accepting, asks connections to finish, then calls `done` when none is left (or after
  // `grace_seconds`, whichever comes first).
  void stop(double grace_seconds, std::function<void()> done);

 private:
  void accept_next();
  void refuse_busy(boost::asio::generic::stream_protocol::socket s);
  void wait_for_connections();

  http_context& ctx_;
  acceptor acceptor_;
  boost::asio::steady_timer stop_timer_;
  boost::asio::steady_timer poll_timer_;
  std::function<void()> done_;
  bool stopping_ = false;
};

}  // namespace tandem::http
