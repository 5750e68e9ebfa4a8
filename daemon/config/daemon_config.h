// tandemd's configuration: /etc/tandem/tandemd.toml, every key also a command-line flag
// (tandemd.conf(5)). Flags override the file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "protocol/model_settings.h"
#include "runtime/scheduler.h"

namespace tandem::daemon {

inline constexpr const char* default_config_path = "/etc/tandem/tandemd.toml";

// Exit statuses of tandemd (tandemd(8)).
inline constexpr int exit_ok = 0;
inline constexpr int exit_failure = 1;  // startup failed: socket, groups, users, systemd
inline constexpr int exit_usage = 2;    // a bad command line or configuration file

struct model_spec {
  std::string alias;
  std::string path;
};

constexpr int k_gpu_auto = -2;  // daemon_config::gpu before resolve_gpu_auto

struct daemon_config {
  std::string config_file;  // the file that was read; empty if none
  std::string socket_path = "/run/tandem/tandemd.sock";
  std::string socket_group;        // empty: the daemon's own group
  std::string socket_mode = "0660";
  std::vector<std::string> allow_users;   // names or uids, besides root and the daemon's own uid
  std::vector<std::string> allow_groups;  // names or gids; the socket group is always allowed
  std::vector<model_spec> models;          // preloaded; the first is the default alias
  double keep_alive = 0;                   // seconds idle before unload; 0: never
  std::uint64_t memory_budget = 0;         // bytes of all resident models; 0: unlimited
  // Prompt tokens per forward pass, beside one decode token per running sequence: a long prompt
  // delays the others' next token by at most one chunk; cancel is checked between passes.
  std::uint32_t prefill_chunk = k_default_chunk_tokens;
  std::uint32_t parallel = 4;              // sequences per model decoded together (KV: context each)
  std::uint64_t kv_tokens = 0;             // KV pool tokens per model shared by its sequences; 0: context × parallel
  std::string kv_type = "f16";             // KV cache elements: f16, q8_0 (half the bytes) or f32
  double stall_timeout = 300;              // seconds in one forward pass before the engine is unhealthy; 0: never
  // Requests waiting per model beyond its `parallel` running ones: the cap is for overload, so that
  // a burst of clients waits rather than getting `busy`.
  std::uint32_t queue_depth = 64;
  std::uint32_t max_frame = 16u << 20;
  // Client limits (tandemd.conf(5)): past them a new connection gets one `busy` frame and is
  // closed; the clients already connected keep being served.
  std::uint32_t max_connections = 256;          // open connections in all
  std::uint32_t max_connections_per_user = 64;  // open connections of one uid
  double frame_timeout = 30;   // seconds a partly received frame may take to complete; 0: no limit
  // Off by default: `tandem chat` holds its connection between turns, and the connection limits
  // already bound what idle clients can hold.
  double idle_timeout = 0;     // seconds a connection with no request in flight may stay silent; 0: forever
  std::uint64_t max_buffered = 256ull << 20;  // bytes of partly received frames over all connections
  // Seconds to wait at start for the GPUs the configuration names (a driver still coming up)
  // before giving up with exit status 1; READY=1 is not sent while waiting.
  double gpu_wait = 60;
  // CUDA device that serves models; -1: the CPU backend; k_gpu_auto ("auto"): resolve_gpu_auto.
  int gpu = k_gpu_auto;
  std::string gpus;    // several CUDA devices, each model split by layers over them ("0,1", "0=16GiB,1=32GiB")
  std::string ratios;  // with gpus: shares per device in these proportions; empty: the memory plan's
  std::string split = "layer";  // with gpus: layer ranges, or tensor (every layer cut)
  // Per alias: its [model.NAME] table (and the deprecated model-gpus / model-ratios / model-split
  // keys, folded in). A table's settings win over the global keys; a load's options over both.
  std::map<std::string, proto::model_settings> model_tables;
  std::uint32_t threads = 0;
  std::uint32_t context = 4096;  // KV cache tokens per sequence
  std::string chat_format;
  double drain_timeout = 30;
  std::string log_level = "info";
  std::vector<std::string> notes;  // for the log at startup: deprecated keys, tables without a path
};

// gpu = auto, resolved against the `devices` CUDA devices present: nothing when gpus is set;
// none: the CPU backend; one: that device; several: gpus lists them all (each model split over
// them by its memory plan). Only auto falls back to the CPU: a device named by id is waited for
// (gpu-wait) or the daemon exits. Returns the choice in words, for the log.
std::string resolve_gpu_auto(daemon_config& c, int devices);

// Parses argv (and the config file it names or the default one, if present). Returns the config,
// or, with exit_now, the text to print and the status to exit with: exit_ok for --help and
// --version, exit_usage for any error.
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

// "8GiB", "512 MiB", "1.5G", "4000000000": bytes. K M G T and KiB MiB GiB TiB are powers of 1024,
// KB MB GB TB powers of 1000; case does not matter. `key` names the setting in errors.
result<std::uint64_t> parse_byte_size(const std::string& text, const std::string& key);

}  // namespace tandem::daemon
