// Accepting into generic stream sockets lets one connection class serve TCP and Unix clients.
#include "server.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <memory>

#include "connection.h"
#include "connection_manager.h"
#include "openai_reply.h"

namespace tandem::http {

namespace asio = boost::asio;

server::server(http_context& ctx) : ctx_(ctx), stop_timer_(ctx.io), poll_timer_(ctx.io) {}

std::string server::listen(const std::vector<inherited_socket>& inherited) {
  for (const auto& s : inherited) {
    auto l = std::make_unique<listener>(ctx_.io, s.address, true);
    boost::system::error_code ec;
    l->sock.assign(asio::generic::stream_protocol(s.family, s.family == AF_UNIX ? 0 : IPPROTO_TCP), s.fd, ec);
    if (ec) return "cannot use the socket passed for " + s.address.describe() + ": " + ec.message();
    listeners_.push_back(std::move(l));
  }
  if (inherited.empty()) {
    auto l = std::make_unique<listener>(ctx_.io, ctx_.options.listen, false);
    if (auto why = open_acceptor(l->sock, l->address); !why.empty()) return why;
    if (l->address.type == listen_address::kind::tcp) {
      // Port 0 picks a free port: say which (tests read it from this line). sin_port and
      // sin6_port sit at the same offset, so this reads IPv4 and IPv6 alike.
      boost::system::error_code ec;
      const auto ep = l->sock.local_endpoint(ec);
      if (!ec && ep.size() >= sizeof(sockaddr_in))
        l->address.port = ntohs(reinterpret_cast<const sockaddr_in*>(ep.data())->sin_port);
    }
    listeners_.push_back(std::move(l));
  }
  for (auto& l : listeners_) {
    ctx_.log.log(log_level::info, "serving HTTP on ", l->address.describe(), l->inherited ? " (passed by systemd)" : "",
                 " for tandemd at ", ctx_.options.socket,
                 ctx_.options.token.empty() ? " (no token required)" : " (bearer token required)");
    accept_next(*l);
  }
  return {};
}

void server::accept_next(listener& l) {
  l.sock.async_accept([this, &l](const boost::system::error_code& ec, asio::generic::stream_protocol::socket s) {
    if (stopping_) return;
    if (ec) {
      // EMFILE and the like: pause instead of spinning on an error that repeats at once.
      ctx_.log.log(log_level::warning, "accept on ", l.address.describe(), ": ", ec.message());
      l.retry.expires_after(std::chrono::milliseconds(100));
      l.retry.async_wait([this, &l](const boost::system::error_code& tec) {
        if (!tec && !stopping_) accept_next(l);
      });
      return;
    }
    if (ctx_.connections.size() >= ctx_.options.max_connections) {
      ctx_.metrics.connection_refused();
      refuse_busy(std::move(s));
    } else {
      if (l.address.type == listen_address::kind::tcp) {
        boost::system::error_code ignored;  // events go out as they come, not after Nagle's delay
        s.set_option(asio::ip::tcp::no_delay(true), ignored);
      }
      std::make_shared<connection>(std::move(s), ctx_)->start();
    }
    accept_next(l);
  });
}

namespace {

// One refused connection: the 503 is written, the sending side shut, and what the client still
// sends is read and dropped for up to a second, so that a TCP client reads the 503 instead of a
// reset caused by closing with its request unread.
struct busy_refusal : std::enable_shared_from_this<busy_refusal> {
  busy_refusal(asio::generic::stream_protocol::socket s, std::string text)
      : sock(std::move(s)), timer(sock.get_executor()), reply(std::move(text)) {}

  void start() {
    timer.expires_after(std::chrono::seconds(1));
    timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->sock.close(self->ignored);
    });
    asio::async_write(sock, asio::buffer(reply), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                              std::size_t) {
      if (ec) return self->finish();
      self->sock.shutdown(asio::socket_base::shutdown_send, self->ignored);
      self->drain();
    });
  }
  void drain() {
    sock.async_read_some(asio::buffer(scratch), [self = shared_from_this()](const boost::system::error_code& ec,
                                                                             std::size_t) {
      if (ec) return self->finish();
      self->drain();
    });
  }
  void finish() {
    timer.cancel();
    sock.close(ignored);
  }

  asio::generic::stream_protocol::socket sock;
  asio::steady_timer timer;
  std::string reply;
  std::array<char, 1024> scratch{};
  boost::system::error_code ignored;
};

}  // namespace

void server::refuse_busy(asio::generic::stream_protocol::socket s) {
  const std::string body = dump(error_body({503, "tandem-http serves too many connections; retry later",
                                            "server_error", "", "too_many_connections"}));
  std::make_shared<busy_refusal>(std::move(s), "HTTP/1.1 503 Service Unavailable\r\nServer: tandem-http\r\n"
                                               "Content-Type: application/json\r\nConnection: close\r\n"
                                               "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body)
      ->start();
}

void server::stop(double grace_seconds, std::function<void()> done) {
  if (stopping_) return;
  stopping_ = true;
  done_ = std::move(done);
  for (auto& l : listeners_) {
    boost::system::error_code ignored;
    l->sock.close(ignored);
    l->retry.cancel();
    if (!l->inherited && l->address.type == listen_address::kind::unix_path) ::unlink(l->address.path.c_str());
  }
  ctx_.connections.stop_all();
  stop_timer_.expires_after(std::chrono::milliseconds(static_cast<long>(grace_seconds * 1000)));
  stop_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !done_) return;
    ctx_.log.log(log_level::warning, ctx_.connections.size(), " connection(s) still busy at the end of the grace time");
    std::exchange(done_, nullptr)();
  });
  wait_for_connections();
}

// Polled: connections leave the manager from their destructors, which should not call out.
void server::wait_for_connections() {
  if (!done_) return;
  if (ctx_.connections.size() == 0) {
    stop_timer_.cancel();
    std::exchange(done_, nullptr)();
    return;
  }
  poll_timer_.expires_after(std::chrono::milliseconds(50));
  poll_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) wait_for_connections();
  });
}

}  // namespace tandem::http
