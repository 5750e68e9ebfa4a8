// The --listen value: "HOST:PORT" (an IP address or localhost; IPv6 in brackets) or
// "unix:/path", and opening a listening socket on it.
#pragma once

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/basic_socket_acceptor.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::http {

struct listen_address {
  enum class kind { tcp, unix_path };
  kind type = kind::tcp;
  std::string host;  // numeric address
  std::uint16_t port = 0;
  std::string path;  // kind::unix_path

  std::string describe() const;  // "127.0.0.1:8080", "[::1]:8080", "unix:/run/x.sock"
};

// The parsed address, or nullopt with `why` saying what is wrong (a usage error).
std::optional<listen_address> parse_listen(std::string_view text, std::string& why);

using acceptor = boost::asio::basic_socket_acceptor<boost::asio::generic::stream_protocol>;

// Binds and listens. A Unix socket file left by a server that is gone is replaced; a live one
// or a file that is not a socket is an error. Returns the error text, empty on success.
std::string open_acceptor(acceptor& a, const listen_address& addr);

}  // namespace tandem::http
