// tandemd's configuration: /etc/tandem/tandemd.toml, every key also a command-line flag
// (tandemd.conf(5)). Flags override the file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"

namespace tandem::daemon {

inline constexpr const char* default_config_path = "/etc/tandem/tandemd.toml";

struct model_spec {
  std::string alias;
  std::string path;
};

struct daemon_config {
  std::string config_file;  // the file that was read; empty if none
  std::string socket_path = "/run/tandem/tandemd.sock";
  std::string socket_group;        // empty: the daemon's own group
  std::string socket_mode = "0660";
  std::vector<std::string> allow_users;   // names or uids, besides root and the daemon's own uid
  std::vector<std::string> allow_groups;  // names or gids; the socket group is always allowed
  std::vector<model_spec> models;          // preloaded; the first is the default alias
  double keep_alive = 0;                   // seconds idle before unload; 0: never
  std::uint32_t queue_depth = 16;
  std::uint32_t max_frame = 16u << 20;
  int gpu = -1;  // CUDA device that serves models; -1: the CPU backend
  std::uint32_t threads = 0;
  std::uint32_t context = 4096;
  std::string chat_format;
  double drain_timeout = 30;
  std::string log_level = "info";
};

// Parses argv (and the config file it names or the default one, if present). Returns the config,
// or an error whose message is ready to print; `exit_code` is set for --help/--version (0).
struct parse_outcome {
  daemon_config config;
  bool exit_now = false;
  int exit_code = 0;
  std::string output;  // help text or the error
};
parse_outcome parse_config(int argc, const char* const* argv);

// Re-reads for SIGHUP with the same command line.
parse_outcome reparse_config(const std::vector<std::string>& argv);

// "NAME=FILE" → model_spec.
result<model_spec> parse_model_spec(const std::string& s);

}  // namespace tandem::daemon
