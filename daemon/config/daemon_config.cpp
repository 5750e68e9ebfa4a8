// Command line and config file through CLI11: one option per key, the TOML file as defaults.
#include "config/daemon_config.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>
#include <vector>

#include "config/model_table.h"
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

result<std::uint64_t> parse_byte_size(const std::string& text, const std::string& key) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string unit;
  for (std::size_t j = i; j < text.size(); ++j)
    if (text[j] != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[j])));
  const std::pair<const char*, double> units[] = {
      {"", 1},       {"b", 1},       {"k", 0x1p10},  {"kib", 0x1p10}, {"kb", 1e3},     {"m", 0x1p20},
      {"mib", 0x1p20}, {"mb", 1e6},  {"g", 0x1p30},  {"gib", 0x1p30}, {"gb", 1e9},     {"t", 0x1p40},
      {"tib", 0x1p40}, {"tb", 1e12}};
  double scale = 0;
  for (const auto& [name, v] : units)
    if (unit == name) scale = v;
  double number = 0;
  try {
    std::size_t used = 0;
    if (i > 0) number = std::stod(text.substr(0, i), &used);
    if (i == 0 || used != i) scale = 0;
  } catch (const std::exception&) {
    scale = 0;
  }
  const double bytes = number * scale;
  if (scale == 0 || !std::isfinite(bytes) || bytes >= 0x1p63)
    return make_error(key, " '", text, "': expected a size such as 8GiB, 512MiB or a number of bytes");
  return static_cast<std::uint64_t>(bytes);
}

namespace {

// Values CLI11 keeps as text and finish() converts.
struct raw_options {
  std::vector<std::string> models;
  std::vector<std::string> model_gpus, model_ratios, model_split;  // NAME=VALUE
  std::string memory_budget = "0";
  std::string gpu = "auto";
  std::shared_ptr<model_tables_read> tables = std::make_shared<model_tables_read>();
};

void define_options(CLI::App& app, daemon_config& c, raw_options& raw) {
  app.set_config("--config", default_config_path, "Config file (TOML); keys are the long option names");
  app.config_formatter(std::make_shared<model_table_config>(raw.tables));
  // A misspelt key would otherwise be dropped silently and the daemon run with a default.
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--socket", c.socket_path, "Unix socket path")->capture_default_str();
  app.add_option("--socket-group", c.socket_group, "Group owning the socket (default: the daemon's)");
  app.add_option("--socket-mode", c.socket_mode, "Octal permissions of the socket")->capture_default_str();
  app.add_option("--allow-user", c.allow_users, "Users (names or uids) allowed besides root and the daemon");
  app.add_option("--allow-group", c.allow_groups, "Groups (names or gids) allowed besides the socket group");
  app.add_option("--model", raw.models, "Preload NAME=FILE.gguf; the first is the default alias");
  app.add_option("--keep-alive", c.keep_alive, "Idle seconds before a model is unloaded (0: never)")
      ->check(CLI::Range(0.0, proto::max_keep_alive_s))->capture_default_str();
  app.add_option("--memory-budget", raw.memory_budget,
                 "Bytes all resident models may hold together, e.g. 8GiB; idle models are evicted "
                 "least recently used first (0: unlimited)")
      ->capture_default_str();
  app.add_option("--queue-depth", c.queue_depth, "Requests waiting per model (beyond the parallel ones running) before 'busy'")
      ->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  app.add_option("--max-frame", c.max_frame, "Largest accepted frame in bytes")
      ->check(CLI::Range(1024u, 1u << 30))->capture_default_str();
  app.add_option("--max-connections", c.max_connections, "Open client connections in all; more get 'busy'")
      ->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  app.add_option("--max-connections-per-user", c.max_connections_per_user,
                 "Open client connections of one uid; more get 'busy'")
      ->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  app.add_option("--frame-timeout", c.frame_timeout,
                 "Seconds a partly received frame may take to complete before the connection is closed (0: no limit)")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  app.add_option("--idle-timeout", c.idle_timeout,
                 "Seconds a connection with no request in flight may stay silent before it is closed (0: forever)")
      ->check(CLI::Range(0.0, 1e9))->capture_default_str();
  app.add_option("--max-buffered", c.max_buffered,
                 "Bytes of partly received frames over all connections; the connection that passes it gets 'busy'")
      ->check(CLI::Range(uint64_t(1) << 16, uint64_t(1) << 40))->capture_default_str();
  app.add_option("--gpu-wait", c.gpu_wait,
                 "Seconds to wait at start for the configured GPUs before exiting with status 1")
      ->check(CLI::Range(0.0, 86400.0))->capture_default_str();
  app.add_option("--gpu", raw.gpu,
                 "CUDA device that serves models: an id, -1 (the CPU backend) or auto (every GPU present; "
                 "the CPU when there is none)")
      ->capture_default_str();
  app.add_option("--gpus", c.gpus,
                 "Several CUDA devices, each model split over them, e.g. 0,1 or 0=16GiB,1=32GiB (caps); "
                 "a model whose memory plan does not fit is refused (overrides --gpu)");
  app.add_option("--ratios", c.ratios, "With --gpus: each device's share in these proportions, e.g. 1,1.75 "
                                       "(default: the memory plan's balance)");
  app.add_option("--split", c.split, "With --gpus: layer (contiguous layer ranges) or tensor (every layer cut "
                                     "by KV heads and FFN columns, partial sums exchanged)")
      ->check(CLI::IsMember({"layer", "tensor"}))->capture_default_str();
  app.add_option("--model-gpus", raw.model_gpus,
                 "Deprecated ([model.NAME] gpus): NAME=LIST, that alias's devices instead of --gpus");
  app.add_option("--model-ratios", raw.model_ratios, "Deprecated ([model.NAME] ratios): NAME=R, that alias's ratios");
  app.add_option("--model-split", raw.model_split, "Deprecated ([model.NAME] split): NAME=layer|tensor, that alias's split");
  app.add_option("--threads", c.threads, "CPU backend threads per model (0: all cores)")->capture_default_str();
  app.add_option("--context", c.context, "KV cache tokens per sequence (capped by the model's own)")
      ->check(CLI::Range(proto::min_context, proto::max_context))->capture_default_str();
  app.add_option("--parallel", c.parallel,
                 "Sequences per model decoded together; the KV cache holds context tokens for each")
      ->check(CLI::Range(1u, proto::max_parallel))->capture_default_str();
  app.add_option("--kv-tokens", c.kv_tokens,
                 "KV cache tokens per model shared by its sequences (0: context x parallel, so each can "
                 "reach its context); a sequence that finds the pool full ends with an error")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 31))->capture_default_str();
  app.add_option("--kv-type", c.kv_type, "KV cache element type: f16, q8_0 (half the memory) or f32")
      ->check(CLI::IsMember({"f16", "q8_0", "f32"}))->capture_default_str();
  app.add_option("--prefill-chunk", c.prefill_chunk,
                 "Prompt tokens per forward pass, beside one decode token per running sequence; "
                 "a cancel takes effect between passes")
      ->check(CLI::Range(1u, 65536u))->capture_default_str();
  app.add_option("--stall-timeout", c.stall_timeout,
                 "Seconds one forward pass may take before the engine counts as wedged and the "
                 "watchdog ping stops (0: never)")
      ->check(CLI::Range(0.0, 1e6))->capture_default_str();
  app.add_option("--chat-format", c.chat_format, "Override the chat template: raw, chatml, qwen3, llama3");
  app.add_option("--drain-timeout", c.drain_timeout, "Seconds to let requests finish on SIGTERM")
      ->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  app.add_option("--log-level", c.log_level, "error, warning, notice, info or debug")
      ->check(CLI::IsMember({"error", "warning", "notice", "info", "debug"}))->capture_default_str();
  app.set_version_flag("--version", std::string("tandemd ") + TANDEM_VERSION);
}

parse_outcome usage_error(std::string msg) {
  parse_outcome out;
  out.exit_now = true;
  out.exit_code = exit_usage;
  out.output = std::move(msg) + "\nRun with --help for more information.\n";
  return out;
}

// The deprecated model-gpus / model-ratios / model-split lists, NAME=VALUE each (VALUE may hold
// '=' itself, device caps: split at the first), folded into per-alias settings.
std::optional<std::string> fold_per_alias_keys(const raw_options& raw, daemon_config& c) {
  using field = std::optional<std::string> proto::model_settings::*;
  const std::tuple<const std::vector<std::string>&, const char*, field> keys[] = {
      {raw.model_gpus, "model-gpus", &proto::model_settings::gpus},
      {raw.model_ratios, "model-ratios", &proto::model_settings::ratios},
      {raw.model_split, "model-split", &proto::model_settings::split}};
  for (const auto& [items, key, member] : keys) {
    const std::string k = std::string("--") + key;
    for (const auto& item : items) {
      const auto eq = item.find('=');
      if (eq == std::string::npos || eq + 1 == item.size()) return k + " '" + item + "': expected NAME=VALUE";
      const std::string name = item.substr(0, eq);
      if (!proto::valid_model_name(name)) return k + " '" + item + "': NAME must be 1-64 of [A-Za-z0-9._:-]";
      auto& slot = c.model_tables[name].*member;
      if (slot) return k + ": alias '" + name + "' given twice";
      slot = item.substr(eq + 1);
    }
    if (!items.empty())
      c.notes.push_back(std::string(key) + " is deprecated: give the setting in a [model.NAME] table (tandemd.conf(5))");
  }
  for (const auto& [name, s] : c.model_tables) {
    if (s.split && !proto::valid_split(*s.split))
      return "--model-split '" + name + "=" + *s.split + "': the split is layer or tensor";
    if (auto e = check_device_fields(s)) return "--model-" + *e;
  }
  return std::nullopt;
}

// The [model.NAME] tables over what fold_per_alias_keys left: a table with a path adds a model to
// preload (after the `model` list, in file order), unless --model names the alias (the flag wins).
std::optional<std::string> apply_model_tables(const model_tables_read& read, const std::string& file,
                                              daemon_config& c) {
  const auto where = [&file](const model_table& t) { return file + ":" + std::to_string(t.line) + ": "; };
  if (!read.error.empty()) return file + ":" + std::to_string(read.error_line) + ": " + read.error;
  for (const auto& t : read.tables) {
    const bool preloaded = std::any_of(c.models.begin(), c.models.end(), [&](auto& m) { return m.alias == t.name; });
    const bool listed = std::find(read.listed.begin(), read.listed.end(), t.name) != read.listed.end();
    if (t.path && preloaded && listed)
      return where(t) + "[model." + t.name + "]: path: the model key names '" + t.name + "' too; give its file once";
    if (t.path && !preloaded) c.models.push_back({t.name, *t.path});
    if (!t.path && !preloaded)
      c.notes.push_back("[model." + t.name + "] has no path: its settings apply when a load names '" + t.name + "'");
    auto& s = c.model_tables[t.name];
    for (auto [member, key] : {std::pair{&proto::model_settings::gpus, "gpus"},
                               std::pair{&proto::model_settings::ratios, "ratios"},
                               std::pair{&proto::model_settings::split, "split"}})
      if (s.*member && t.settings.*member)
        return where(t) + "[model." + t.name + "]: " + key + " is also given by model-" + key +
               " for this alias; keep the table's and drop the deprecated key";
    s = s.overridden_by(t.settings);
  }
  return std::nullopt;
}

parse_outcome finish(CLI::App& app, daemon_config c, const raw_options& raw) {
  parse_outcome out;
  for (const auto& m : raw.models) {
    auto spec = parse_model_spec(m);
    if (!spec) return usage_error(spec.message());
    for (const auto& prev : c.models)
      if (prev.alias == spec->alias) return usage_error("--model: alias '" + spec->alias + "' given twice");
    c.models.push_back(*spec);
  }
  if (auto e = fold_per_alias_keys(raw, c)) return usage_error(*e);
  // The file CLI11 read: the one named by --config, else the default path when it exists.
  if (auto* opt = app.get_config_ptr()) {
    auto f = opt->as<std::string>();
    if (std::filesystem::exists(f)) c.config_file = f;
  }
  if (auto e = apply_model_tables(*raw.tables, c.config_file, c)) {
    out = usage_error("");
    out.output = "tandemd: " + *e + "\n";  // as config_key_error's: the file and line say it all
    return out;
  }
  if (raw.gpu == "auto") {
    c.gpu = k_gpu_auto;
  } else {
    char* end = nullptr;
    const long id = std::strtol(raw.gpu.c_str(), &end, 10);
    if (raw.gpu.empty() || *end != 0 || id < -1 || id > 1023)
      return usage_error("--gpu '" + raw.gpu + "': expected auto, -1 (the CPU backend) or a CUDA device id 0-1023");
    c.gpu = static_cast<int>(id);
  }
  if (!c.gpus.empty())
    if (auto e = check_gpu_list(c.gpus)) return usage_error("--" + *e);
  auto budget = parse_byte_size(raw.memory_budget, "--memory-budget");
  if (!budget) return usage_error(budget.message());
  c.memory_budget = *budget;
  out.config = std::move(c);
  return out;
}

// CLI11 says "INI was not able to parse contxt" for a key it does not know: name the file, the
// line and the nearest known key instead.
std::string config_key_error(const CLI::App& app, const std::string& message) {
  const std::string lead = "INI was not able to parse ";
  const auto* opt = app.get_config_ptr();
  if (message.rfind(lead, 0) != 0 || !opt) return message;
  const std::string key = message.substr(lead.size()), file = opt->as<std::string>();
  std::ifstream in(file);
  std::string line, where = file;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t b = line.find_first_not_of(" \t");
    if (b != std::string::npos && line.compare(b, key.size(), key) == 0) {
      where += ":" + std::to_string(n);
      break;
    }
  }
  std::vector<std::string> names;
  for (const CLI::Option* o : app.get_options()) names.push_back(o->get_single_name());
  const std::string best = nearest_key(key, names);
  return where + ": unknown key '" + key + "'" + (best.empty() ? "" : "; did you mean '" + best + "'?") +
         " (the keys are tandemd.conf(5)'s)";
}

template <class Parse>
parse_outcome run_parse(Parse&& parse) {
  CLI::App app{"tandemd: serves GGUF language models over a Unix socket"};
  daemon_config c;
  raw_options raw;
  define_options(app, c, raw);
  try {
    parse(app);
  } catch (const CLI::ParseError& e) {
    parse_outcome out;
    out.exit_now = true;
    std::ostringstream os, es;
    // CLI11 returns its own status per error kind; tandemd(8) documents one: 2.
    out.exit_code = app.exit(e, os, es) == 0 ? exit_ok : exit_usage;
    out.output = os.str() + es.str();
    if (std::string(e.what()).rfind("INI was not able to parse ", 0) == 0)
      out.output = "tandemd: " + config_key_error(app, e.what()) + "\n";
    return out;
  }
  return finish(app, std::move(c), raw);
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

std::string resolve_gpu_auto(daemon_config& c, int devices) {
  if (c.gpu != k_gpu_auto) return {};
  c.gpu = -1;
  if (!c.gpus.empty()) return "gpu = auto: gpus = " + c.gpus + " serves";
  if (devices <= 0) return "gpu = auto: no CUDA device found; models are served on the CPU";
  if (devices == 1) {
    c.gpu = 0;
    return "gpu = auto: CUDA device 0 serves models";
  }
  for (int d = 0; d < devices; ++d) c.gpus += (d ? "," : "") + std::to_string(d);
  return "gpu = auto: each model is split over CUDA devices " + c.gpus;
}

}  // namespace tandem::daemon
