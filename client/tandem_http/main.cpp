// tandem-http: an OpenAI-compatible HTTP front for tandemd (tandem-http(8)). One thread, one
// io_context: the HTTP connections and the one multiplexed connection to tandemd's socket.
#include <csignal>
#include <cstdio>
#include <ctime>
#include <exception>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "connection_manager.h"
#include "daemon_link.h"
#include "http_context.h"
#include "options.h"
#include "server.h"
#include "socket_activation.h"

namespace {

// Seconds a stop waits for replies in progress before closing their connections.
constexpr double stop_grace_seconds = 10;

int serve(const tandem::http::http_options& opt) {
  using namespace tandem::http;
  namespace asio = boost::asio;
  asio::io_context io(1);
  logger log(opt.level);
  const auto activation = take_activated_sockets();
  if (!activation.error.empty()) {
    log.log(log_level::error, "socket activation: ", activation.error);
    return exit_failure;
  }
  // The socket unit says where to listen; a --listen too (say, left in tandem-http.env) loses,
  // so that enabling tandem-http.socket needs no edit of the service's arguments.
  if (!activation.sockets.empty() && opt.listen_given)
    log.log(log_level::info, "--listen ", opt.listen.describe(), " ignored: serving on the socket(s) passed by systemd");
  connection_manager connections;
  daemon_link link(io, opt.socket, log);
  http_metrics metrics;
  http_context ctx{io, opt, link, log, connections, metrics, static_cast<std::int64_t>(std::time(nullptr))};
  server srv(ctx);
  if (auto why = srv.listen(activation.sockets); !why.empty()) {
    log.log(log_level::error, why);
    return exit_failure;
  }
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    log.log(log_level::info, "signal ", sig, ": stopping (replies in progress get ", stop_grace_seconds, " s)");
    srv.stop(stop_grace_seconds, [&] { io.stop(); });
  });
  io.run();
  // Everything still open is closed and its handlers run to completion (aborted) before the
  // objects they point at are destroyed.
  connections.abort_all();
  link.close();
  signals.cancel();
  io.restart();
  io.run_for(std::chrono::seconds(3));
  log.log(log_level::info, "stopped");
  return exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem::http;
  auto parsed = parse_options(argc, argv);
  if (parsed.exit_now) {
    std::fputs(parsed.output.c_str(), parsed.exit_code == exit_ok ? stdout : stderr);
    return parsed.exit_code;
  }
  // Asio sends with MSG_NOSIGNAL already; this also covers anything else writing to a closed pipe.
  std::signal(SIGPIPE, SIG_IGN);
  try {
    return serve(parsed.options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-http: error: %s\n", e.what());
    return exit_failure;
  }
}
