// CLI11 options; every usage error ends with exit_usage whatever CLI11 would return.
#include "options.h"

#include <CLI/CLI.hpp>

#include <fstream>
#include <sstream>

#include "config/daemon_config.h"

namespace tandem::http {
namespace {

// The token is the file's first line without surrounding blanks; a file that cannot be read or
// holds no token is a usage error (the service should not start open by mistake).
std::string read_token(const std::string& path, std::string& why) {
  std::ifstream f(path);
  if (!f) {
    why = "cannot read the token file " + path;
    return {};
  }
  std::string line;
  std::getline(f, line);
  const auto b = line.find_first_not_of(" \t\r\n"), e = line.find_last_not_of(" \t\r\n");
  if (b == std::string::npos) {
    why = "the token file " + path + " holds no token";
    return {};
  }
  return line.substr(b, e - b + 1);
}

parse_outcome usage_error(std::string message) {
  parse_outcome o;
  o.exit_now = true;
  o.exit_code = exit_usage;
  o.output = "tandem-http: " + message + "\n";
  return o;
}

}  // namespace

parse_outcome parse_options(int argc, const char* const* argv) {
  CLI::App app{"tandem-http: an OpenAI-compatible HTTP front for tandemd", "tandem-http"};
  app.set_version_flag("--version", std::string("tandem-http ") + TANDEM_VERSION);
  app.footer("Exit status: 0 ok, 1 runtime failure (cannot listen), 2 usage. See tandem-http(8).");
  http_options opt;
  std::string listen = "127.0.0.1:8080", token_file, level = "info";
  // One source of truth for the default: the daemon's own configuration default.
  opt.socket = daemon::daemon_config{}.socket_path;
  app.add_option("--listen", listen, "HOST:PORT or unix:/path to serve HTTP on")->capture_default_str();
  app.add_option("--socket", opt.socket, "tandemd's Unix socket")->envname("TANDEM_SOCKET")->capture_default_str();
  app.add_option("--token-file", token_file, "Require 'Authorization: Bearer TOKEN', TOKEN read from this file");
  app.add_option("--max-body", opt.max_body, "Largest request body (bytes; K, M suffixes)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--timeout", opt.timeout, "Seconds to receive a request's header and body (408 after)")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  app.add_option("--max-connections", opt.max_connections, "HTTP connections at once (more get 503)")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--log-level", level, "error, warning, info (one line per request) or debug")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    parse_outcome o;
    o.exit_now = true;
    std::ostringstream out, err;
    o.exit_code = app.exit(e, out, err) == 0 ? exit_ok : exit_usage;
    o.output = out.str() + err.str();
    return o;
  }
  std::string why;
  auto addr = parse_listen(listen, why);
  if (!addr) return usage_error("--listen " + listen + ": " + why);
  opt.listen = *addr;
  opt.listen_given = app.count("--listen") > 0;
  if (opt.socket.empty() || opt.socket.size() >= 108)
    return usage_error("--socket: the path is empty or longer than 107 bytes");
  if (!parse_log_level(level, opt.level)) return usage_error("--log-level: '" + level + "' is not error, warning, info or debug");
  if (!token_file.empty()) {
    opt.token = read_token(token_file, why);
    if (opt.token.empty()) return usage_error(why);
  }
  parse_outcome o;
  o.options = std::move(opt);
  return o;
}

}  // namespace tandem::http
