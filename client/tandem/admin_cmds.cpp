// tandem ps, models, status, load, unload, swap, tokenize: one request each, printed as a table or
// text for people, or as the reply's result (one JSON line) with --json.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "connect.h"
#include "load_progress_line.h"
#include "output.h"
#include "prompt_input.h"
#include "protocol/request.h"

namespace tandem::client {
namespace {

// Connects, makes one call and hands its reply to `show` (or prints its result map with --json).
// With `loading` (an alias), a terminal shows that alias's load progress meanwhile.
template <class Reply>
int one_call(const global_options& g, const std::function<result<Reply>(connection&)>& call,
             const std::function<void(const Reply&)>& show, const std::string& loading = "") {
  auto c = connect_to_daemon(g.socket);
  if (!c.ok()) return report(c.fail());
  std::optional<load_progress_line> wait;
  if (!loading.empty() && !g.json) wait.emplace(g.socket, loading);
  auto r = call(*c);
  if (wait) wait->stop();
  if (!r.ok()) return report(to_failure(r.err()));
  if (g.json) print_json_text(r->result_json);
  else show(*r);
  return 0;
}

// Table cells: "-" for what the daemon did not send.
std::string text(const std::optional<std::string>& s) { return s ? *s : "-"; }
std::string text(const std::optional<std::uint64_t>& n) { return n ? std::to_string(*n) : "-"; }
std::string text(bool b) { return b ? "yes" : "no"; }

std::string keep_alive_text(const model_info& m) {
  if (!m.keep_alive_s) return "-";
  return *m.keep_alive_s <= 0 ? "forever" : human_duration(*m.keep_alive_s);
}

void show_ps(const models_reply& r) {
  // Hybrid models keep a recurrent state per sequence inside their cache: a column of its own
  // (RECURRENT, part of CACHE) only when some model listed has one.
  bool any_state = false;
  for (const auto& m : r.models) any_state = any_state || m.state_bytes.value_or(0) > 0;
  std::vector<std::string> head = {"NAME", "STATE", "ARCH", "BACKEND", "DEVICE", "FILE", "CACHE"};
  if (any_state) head.push_back("RECURRENT");
  for (const char* h : {"CONTEXT", "KV", "QUEUED", "SEQUENCES", "KEEP-ALIVE"}) head.push_back(h);
  std::vector<std::vector<std::string>> rows = {head};
  for (const auto& m : r.models) {
    if (m.state == "unloaded") continue;
    const bool resident = m.state == "resident";
    std::vector<std::string> row = {m.name + (m.is_default ? " *" : ""), m.state, text(m.arch), text(m.backend),
                                    text(m.device), resident ? human_bytes(m.file_bytes.value_or(0)) : "-",
                                    resident ? human_bytes(m.cache_bytes.value_or(0)) : "-"};
    if (any_state) row.push_back(resident && m.state_bytes.value_or(0) ? human_bytes(*m.state_bytes) : "-");
    // Sequences decoding or prefilling out of the model's slots ("2/4").
    const std::string seqs =
        resident && m.sequences ? std::to_string(m.sequences->running) + "/" + text(m.parallel) : "-";
    for (const std::string& c : {text(m.n_ctx), text(m.kv_type), std::to_string(m.queued), seqs, keep_alive_text(m)})
      row.push_back(c);
    rows.push_back(std::move(row));
  }
  if (rows.size() == 1) std::printf("no model is loaded (tandem load NAME FILE.gguf)\n");
  else print_table(rows);
}

void show_models(const models_reply& r) {
  std::vector<std::vector<std::string>> rows = {{"NAME", "STATE", "DEFAULT", "SWAPS", "PATH"}};
  for (const auto& m : r.models)
    rows.push_back({m.name, m.state, text(m.is_default), std::to_string(m.swaps), m.path});
  if (rows.size() == 1) std::printf("no models (tandem load NAME FILE.gguf)\n");
  else print_table(rows);
}

void show_status(const status_reply& r) {
  const auto& mem = r.memory;
  std::size_t resident = 0;
  for (const auto& m : r.models)
    if (m.state == "resident") ++resident;
  std::printf("tandemd %s (protocol %d), pid %lld, up %s%s\n", r.version.c_str(), r.protocol,
              static_cast<long long>(r.pid), human_duration(r.uptime_seconds).c_str(), r.draining ? ", draining" : "");
  std::printf("connections %llu, in flight %llu, queued %llu\n", static_cast<unsigned long long>(r.connections),
              static_cast<unsigned long long>(r.in_flight), static_cast<unsigned long long>(r.queued));
  std::printf("memory: %s resident, %s in models", human_bytes(mem.rss_bytes).c_str(),
              human_bytes(mem.model_bytes).c_str());
  if (mem.budget_bytes > 0)
    std::printf(", budget %s (%s used)", human_bytes(mem.budget_bytes).c_str(),
                human_bytes(mem.budget_used_bytes).c_str());
  std::printf("\n");
  for (const auto& d : r.devices) {
    std::string names;
    for (const auto& n : d.models) names += (names.empty() ? "" : ", ") + n;
    std::printf("  %s: %s in models%s%s", d.device.c_str(), human_bytes(d.model_bytes).c_str(),
                names.empty() ? "" : " (", names.empty() ? "" : (names + ")").c_str());
    if (d.total_bytes)
      std::printf(", %s of %s available", human_bytes(d.available_bytes.value_or(0)).c_str(),
                  human_bytes(*d.total_bytes).c_str());
    std::printf("\n");
  }
  std::printf("models: %zu, %zu resident\n", r.models.size(), resident);
  for (const auto& m : r.models)
    if (m.load)
      std::printf("  %s: loaded %s in %s (%s)\n", m.name.c_str(), decimal_bytes(m.load->bytes).c_str(),
                  load_seconds(m.load->seconds).c_str(), decimal_rate(m.load->bytes_per_second).c_str());
  for (const auto& l : r.loads) {
    const char* verb = l.op == "swap" ? "swapping to" : l.op == "reload" ? "reloading" : "loading";
    std::printf("  %s: %s %s: ", l.name.c_str(), verb, l.path.c_str());
    if (l.total_bytes > 0)
      std::printf("%s, %s, %s\n", bytes_of_total(l.done_bytes, l.total_bytes).c_str(), load_seconds(l.seconds).c_str(),
                  decimal_rate(l.bytes_per_second).c_str());
    else
      std::printf("%s\n", load_seconds(l.seconds).c_str());
  }
}

void show_loaded(const char* verb, const loaded_reply& r) {
  const std::string where = r.backend + (r.device && *r.device != r.backend ? " (" + *r.device + ")" : "");
  const std::string kv = r.kv_type ? " " + *r.kv_type : "";
  // How long the load took comes after the name, so "loaded 'NAME'" stays the line's start.
  const std::string took =
      r.load ? " in " + load_seconds(r.load->seconds) + " (" + decimal_rate(r.load->bytes_per_second) + ")" : "";
  std::printf("%s '%s'%s: %s on %s, %s file, %s%s cache, %llu tokens of context\n", verb, r.name.c_str(),
              took.c_str(), r.arch.c_str(), where.c_str(), human_bytes(r.file_bytes).c_str(),
              human_bytes(r.cache_bytes).c_str(), kv.c_str(), static_cast<unsigned long long>(r.n_ctx));
}

// The daemon resolves paths in its own working directory; a path typed here means ours.
std::string absolute_path(const std::string& p) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(p, ec);
  return ec ? p : abs.lexically_normal().string();
}

struct admin_options {
  std::string name;
  std::string path;
  model_settings settings;        // load, swap
  std::vector<std::string> args;  // tokenize: [MODEL] TEXT
  std::string model;
  bool no_special = false;
};

int check_name(const std::string& name) {
  if (proto::valid_model_name(name)) return 0;
  return report({exit_status::usage, "'" + name + "' is not a model name (1-64 of A-Z a-z 0-9 . _ : -)"});
}

int run_tokenize(const global_options& g, const admin_options& o) {
  std::optional<std::string> piped;
  if (o.args.size() < 2 && stdin_is_piped()) {
    auto t = read_all_stdin();
    if (!t.ok()) return report(t.fail());
    piped = std::move(*t);
  }
  auto src = resolve_prompt(o.args, o.model, piped);
  if (!src.ok()) return report(src.fail());
  const tokenize_request req{src->model, src->prompt, !o.no_special};
  return one_call<tokenize_reply>(
      g, [&req](connection& c) { return c.tokenize(req); },
      [](const tokenize_reply& r) {
        std::string line;
        for (const auto t : r.tokens) line += (line.empty() ? "" : " ") + std::to_string(t);
        std::printf("%s\n", line.c_str());
      });
}

// The model settings of load and swap; what is not given comes from the daemon's configuration.
void add_settings_options(CLI::App* cmd, model_settings& s) {
  cmd->add_option("--context", s.context, "KV cache tokens per sequence (capped by the model's own)")
      ->check(CLI::Range(16u, 1u << 24));
  cmd->add_option("--kv,--kv-type", s.kv_type, "KV cache element type: f16, q8_0 (half the memory) or f32")
      ->check(CLI::IsMember({"f16", "q8_0", "f32"}));
  cmd->add_option("--gpus", s.gpus, "CUDA devices to split the model over, e.g. 0,1 or 0=16GiB,1=32GiB (one id: "
                                    "that GPU alone)");
  cmd->add_option("--split", s.split, "With --gpus: layer or tensor")->check(CLI::IsMember({"layer", "tensor"}));
  cmd->add_option("--ratios", s.ratios, "With --gpus: each device's share, e.g. 1,1.75");
  cmd->add_option("--parallel", s.parallel, "Sequences decoded together")->check(CLI::Range(1u, 256u));
  cmd->add_option("--keep-alive", s.keep_alive_s, "Idle seconds before it is unloaded (0: never)")
      ->check(CLI::Range(0.0, 1e9));
}

// A command that is one request without arguments (`ps` asks for `models`, shown differently).
template <class Reply>
void add_simple(CLI::App& app, const global_options& g, action& act, const char* name, const char* help,
                result<Reply> (connection::*call)(), void (*show)(const Reply&)) {
  auto* cmd = app.add_subcommand(name, help);
  cmd->callback([&g, &act, call, show] {
    act = [&g, call, show] { return one_call<Reply>(g, [call](connection& c) { return (c.*call)(); }, show); };
  });
}

}  // namespace

void add_admin_commands(CLI::App& app, const global_options& g, action& act) {
  add_simple<models_reply>(app, g, act, "ps", "List loaded models with their memory, backend and state",
                           &connection::models, show_ps);
  add_simple<models_reply>(app, g, act, "models", "List every model alias the daemon knows", &connection::models,
                           show_models);
  add_simple<status_reply>(app, g, act, "status", "Show the daemon's version, uptime, load and memory",
                           &connection::status, show_status);
  auto o = std::make_shared<admin_options>();

  auto* load = app.add_subcommand("load", "Load a GGUF file under a new alias");
  load->add_option("name", o->name, "Alias to create")->required();
  load->add_option("path", o->path, "GGUF file (relative paths are taken from here)")->required();
  add_settings_options(load, o->settings);
  load->callback([&g, &act, o] {
    act = [&g, o] {
      if (int rc = check_name(o->name)) return rc;
      const load_request req{o->name, absolute_path(o->path), o->settings};
      return one_call<loaded_reply>(
          g, [&req](connection& c) { return c.load(req); },
          [](const loaded_reply& r) { show_loaded("loaded", r); }, o->name);
    };
  });

  auto* swap = app.add_subcommand("swap", "Point an alias at another GGUF file without dropping requests");
  swap->add_option("name", o->name, "Alias to repoint")->required();
  swap->add_option("path", o->path, "The new GGUF file")->required();
  add_settings_options(swap, o->settings);
  swap->callback([&g, &act, o] {
    act = [&g, o] {
      if (int rc = check_name(o->name)) return rc;
      const swap_request req{o->name, absolute_path(o->path), o->settings};
      return one_call<loaded_reply>(
          g, [&req](connection& c) { return c.swap(req); },
          [](const loaded_reply& r) { show_loaded("swapped", r); }, o->name);
    };
  });

  auto* unload = app.add_subcommand("unload", "Remove an alias; requests already accepted still finish");
  unload->add_option("name", o->name, "Alias to remove")->required();
  unload->callback([&g, &act, o] {
    act = [&g, o] {
      if (int rc = check_name(o->name)) return rc;
      return one_call<unload_reply>(
          g, [o](connection& c) { return c.unload(o->name); },
          [](const unload_reply& r) { std::printf("unloaded '%s'\n", r.name.c_str()); });
    };
  });

  auto* tok = app.add_subcommand("tokenize", "Show the token ids a model gives a text");
  tok->add_option("args", o->args, "[MODEL] TEXT; the text may come on stdin instead");
  tok->add_option("-m,--model", o->model, "Model alias (default: the daemon's default model)");
  tok->add_flag("--no-special", o->no_special, "Do not add BOS or other special tokens");
  tok->callback([&g, &act, o] { act = [&g, o] { return run_tokenize(g, *o); }; });
}

}  // namespace tandem::client
