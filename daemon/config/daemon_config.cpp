// Command line and config file through CLI11: one option per key, the TOML file as defaults.
#include "config/daemon_config.h"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <sstream>

#include "log.h"
#include "protocol/request.h"

namespace tandem::daemon {

result<model_spec> parse_model_spec(const std::string& s) {
  const auto eq = s.find('=');
  if (eq == std::string::npos) return make_error("--model '", s, "': expected NAME=FILE.gguf");
  model_spec m{s.substr(0, eq), s.substr(eq + 1)};
  if (!proto::valid_model_name(m.alias)) return make_error("--model '", s, "': NAME must be 1-64 of [A-Za-z0-9._:-]");
  if (m.path.empty()) return make_error("--model '", s, "': FILE is empty");
  return m;
}

namespace {

void define_options(CLI::App& app, daemon_config& c, std::vector<std::string>& models) {
  app.set_config("--config", default_config_path, "Config file (TOML); keys are the long option names");
  // A misspelt key would otherwise be dropped silently and the daemon run with a default.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--socket", c.socket_path, "Unix socket path")->capture_default_str();
  app.add_option("--socket-group", c.socket_group, "Group owning the socket (default: the daemon's)");
  app.add_option("--socket-mode", c.socket_mode, "Octal permissions of the socket")->capture_default_str();
  app.add_option("--allow-user", c.allow_users, "Users (names or uids) allowed besides root and the daemon");
  app.add_option("--allow-group", c.allow_groups, "Groups (names or gids) allowed besides the socket group");
  app.add_option("--model", models, "Preload NAME=FILE.gguf; the first is the default alias");
  app.add_option("--keep-alive", c.keep_alive, "Idle seconds before a model is unloaded (0: never)")
      ->check(CLI::Range(0.0, 1e9))->capture_default_str();
  app.add_option("--queue-depth", c.queue_depth, "Waiting requests per model before 'busy'")
      ->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  app.add_option("--max-frame", c.max_frame, "Largest accepted frame in bytes")
      ->check(CLI::Range(1024u, 1u << 30))->capture_default_str();
  app.add_option("--gpu", c.gpu, "CUDA device that serves models (-1: the CPU backend)")
      ->check(CLI::Range(-1, 1023))->capture_default_str();
  app.add_option("--threads", c.threads, "CPU backend threads per model (0: all cores)")->capture_default_str();
  app.add_option("--context", c.context, "KV cache tokens per model")->check(CLI::Range(16u, 1u << 24))
      ->capture_default_str();
  app.add_option("--chat-format", c.chat_format, "Override the chat template: raw, chatml, qwen3, llama3");
  app.add_option("--drain-timeout", c.drain_timeout, "Seconds to let requests finish on SIGTERM")
      ->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  app.add_option("--log-level", c.log_level, "error, warning, notice, info or debug")
      ->check(CLI::IsMember({"error", "warning", "notice", "info", "debug"}))->capture_default_str();
  app.set_version_flag("--version", std::string("tandemd ") + TANDEM_VERSION);
}

parse_outcome finish(CLI::App& app, daemon_config c, const std::vector<std::string>& models) {
  parse_outcome out;
  for (const auto& m : models) {
    auto spec = parse_model_spec(m);
    if (!spec) {
      out.exit_now = true;
      out.exit_code = 2;
      out.output = spec.message();
      return out;
    }
    for (const auto& prev : c.models)
      if (prev.alias == spec->alias) {
        out.exit_now = true;
        out.exit_code = 2;
        out.output = "--model: alias '" + spec->alias + "' given twice";
        return out;
      }
    c.models.push_back(*spec);
  }
  // The file CLI11 read: the one named by --config, else the default path when it exists.
  if (auto* opt = app.get_config_ptr()) {
    auto f = opt->as<std::string>();
    if (std::filesystem::exists(f)) c.config_file = f;
  }
  out.config = std::move(c);
  return out;
}

template <class Parse>
parse_outcome run_parse(Parse&& parse) {
  CLI::App app{"tandemd: serves GGUF language models over a Unix socket"};
  daemon_config c;
  std::vector<std::string> models;
  define_options(app, c, models);
  try {
    parse(app);
  } catch (const CLI::ParseError& e) {
    parse_outcome out;
    out.exit_now = true;
    std::ostringstream os, es;
    out.exit_code = app.exit(e, os, es);
    out.output = os.str() + es.str();
    return out;
  }
  return finish(app, std::move(c), models);
}

}  // namespace

parse_outcome parse_config(int argc, const char* const* argv) {
  return run_parse([&](CLI::App& app) { app.parse(argc, argv); });
}

parse_outcome reparse_config(const std::vector<std::string>& argv) {
  std::vector<const char*> ptrs;
  for (const auto& a : argv) ptrs.push_back(a.c_str());
  return parse_config(static_cast<int>(ptrs.size()), ptrs.data());
}

}  // namespace tandem::daemon
