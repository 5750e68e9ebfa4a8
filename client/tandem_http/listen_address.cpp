// Only numeric hosts (and "localhost"): resolving names at start would make the bound address
// depend on DNS, and binding beyond loopback should be a deliberate choice.
#include "listen_address.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <charconv>

namespace tandem::http {

namespace asio = boost::asio;

std::string listen_address::describe() const {
  if (type == kind::unix_path) return "unix:" + path;
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

namespace {
std::optional<listen_address> refuse(std::string& why, std::string message) {
  why = std::move(message);
  return std::nullopt;
}
}  // namespace

std::optional<listen_address> parse_listen(std::string_view text, std::string& why) {
  listen_address a;
  if (text.substr(0, 5) == "unix:") {
    a.type = listen_address::kind::unix_path;
    a.path = std::string(text.substr(5));
    if (a.path.empty() || a.path[0] != '/') return refuse(why, "a Unix socket path must be absolute (unix:/path)");
    if (a.path.size() >= 108) return refuse(why, "the Unix socket path is longer than 107 bytes");
    return a;
  }
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) return refuse(why, "expected HOST:PORT or unix:/path");
  std::string_view host = text.substr(0, colon), port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned p = 0;
  const auto r = std::from_chars(port.data(), port.data() + port.size(), p);
  if (r.ec != std::errc() || r.ptr != port.data() + port.size() || p > 65535)
    return refuse(why, "'" + std::string(port) + "' is not a port number (0-65535)");
  a.port = static_cast<std::uint16_t>(p);
  if (host == "localhost") host = "127.0.0.1";
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(std::string(host), ec);
  if (ec) return refuse(why, "'" + std::string(host) + "' is not an IP address (names are not resolved)");
  a.host = ip.to_string();
  return a;
}

namespace {

// A socket file nobody accepts on (ECONNREFUSED) is left over from a server that died.
std::string clear_stale_socket(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return {};
  if (!S_ISSOCK(st.st_mode)) return path + " exists and is not a socket";
  asio::io_context io;
  asio::local::stream_protocol::socket probe(io);
  boost::system::error_code ec;
  probe.connect(asio::local::stream_protocol::endpoint(path), ec);
  if (!ec) return "another server listens on " + path;
  if (ec != asio::error::connection_refused) return "cannot check " + path + ": " + ec.message();
  if (unlink(path.c_str()) != 0) return "cannot remove the stale socket " + path;
  return {};
}

}  // namespace

std::string open_acceptor(acceptor& a, const listen_address& addr) {
  boost::system::error_code ec;
  asio::generic::stream_protocol::endpoint ep;
  if (addr.type == listen_address::kind::unix_path) {
    if (auto why = clear_stale_socket(addr.path); !why.empty()) return why;
    ep = asio::local::stream_protocol::endpoint(addr.path);
  } else {
    ep = asio::ip::tcp::endpoint(asio::ip::make_address(addr.host), addr.port);
  }
  a.open(ep.protocol(), ec);
  if (!ec && addr.type == listen_address::kind::tcp) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return "cannot listen on " + addr.describe() + ": " + ec.message();
  return {};
}

}  // namespace tandem::http
