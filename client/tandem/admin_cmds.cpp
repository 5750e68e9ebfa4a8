// tandem ps, models, status, load, unload, swap, tokenize: one request each, printed as a table or
// text for people, or as the reply's result (one JSON line) with --json.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "daemon_client.h"
#include "output.h"
#include "prompt_input.h"
#include "protocol/request.h"
#include "spinner.h"

namespace tandem::client {
namespace {

using json = nlohmann::json;

// Connects, sends `request` and hands the result to `show` (or prints it with --json).
int one_call(const global_options& g, json request, const std::function<void(const json&)>& show,
             const std::string& waiting = "") {
  auto c = daemon_client::connect(g.socket);
  if (!c.ok()) return report(c.fail());
  std::optional<spinner> wait;
  if (!waiting.empty() && !g.json) wait.emplace(waiting);
  auto r = c->call(std::move(request));
  if (wait) wait->stop();
  if (!r.ok()) return report(r.fail());
  if (g.json) print_json_line(*r);
  else show(*r);
  return 0;
}

std::uint64_t u64(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number_unsigned() ? j[key].get<std::uint64_t>() : 0;
}

std::string keep_alive_text(const json& m) {
  if (!m.contains("keep_alive") || !m["keep_alive"].is_number()) return "-";
  const double s = m["keep_alive"].get<double>();
  return s <= 0 ? "forever" : human_duration(s);
}

void show_ps(const json& r) {
  const json models = r.value("models", json::array());
  // Hybrid models keep a recurrent state per sequence inside their cache: a column of its own
  // (RECURRENT, part of CACHE) only when some model listed has one.
  bool any_state = false;
  for (const auto& m : models) any_state = any_state || u64(m, "state_bytes") > 0;
  std::vector<std::string> head = {"NAME", "STATE", "ARCH", "BACKEND", "DEVICE", "FILE", "CACHE"};
  if (any_state) head.push_back("RECURRENT");
  for (const char* h : {"CONTEXT", "QUEUED", "SEQUENCES", "KEEP-ALIVE"}) head.push_back(h);
  std::vector<std::vector<std::string>> rows = {head};
  for (const auto& m : models) {
    if (!m.is_object() || m.value("state", "") == "unloaded") continue;
    const bool resident = m.value("state", "") == "resident";
    std::vector<std::string> row = {cell(m, "name") + (m.value("default", false) ? " *" : ""), cell(m, "state"),
                                    cell(m, "arch"), cell(m, "backend"), cell(m, "device"),
                                    resident ? human_bytes(u64(m, "file_bytes")) : "-",
                                    resident ? human_bytes(u64(m, "cache_bytes")) : "-"};
    if (any_state) row.push_back(resident && u64(m, "state_bytes") ? human_bytes(u64(m, "state_bytes")) : "-");
    // Sequences decoding or prefilling out of the model's slots ("2/4").
    const std::string seqs = resident && m.contains("sequences") && m["sequences"].is_object()
                                 ? cell(m["sequences"], "running") + "/" + cell(m, "parallel")
                                 : "-";
    for (const std::string& c : {cell(m, "n_ctx"), cell(m, "queued"), seqs, keep_alive_text(m)})
      row.push_back(c);
    rows.push_back(std::move(row));
  }
  if (rows.size() == 1) std::printf("no model is loaded (tandem load NAME FILE.gguf)\n");
  else print_table(rows);
}

void show_models(const json& r) {
  std::vector<std::vector<std::string>> rows = {{"NAME", "STATE", "DEFAULT", "SWAPS", "PATH"}};
  for (const auto& m : r.value("models", json::array()))
    if (m.is_object())
      rows.push_back({cell(m, "name"), cell(m, "state"), cell(m, "default"), cell(m, "swaps"), cell(m, "path")});
  if (rows.size() == 1) std::printf("no models (tandem load NAME FILE.gguf)\n");
  else print_table(rows);
}

void show_status(const json& r) {
  const auto mem = r.value("memory", json::object());
  const auto models = r.value("models", json::array());
  std::size_t resident = 0;
  for (const auto& m : models)
    if (m.is_object() && m.value("state", "") == "resident") ++resident;
  std::printf("tandemd %s (protocol %s), pid %s, up %s%s\n", cell(r, "version").c_str(), cell(r, "protocol").c_str(),
              cell(r, "pid").c_str(), human_duration(r.value("uptime_seconds", 0.0)).c_str(),
              r.value("draining", false) ? ", draining" : "");
  std::printf("connections %s, in flight %s, queued %s\n", cell(r, "connections").c_str(),
              cell(r, "in_flight").c_str(), cell(r, "queued").c_str());
  std::printf("memory: %s resident, %s in models", human_bytes(u64(mem, "rss_bytes")).c_str(),
              human_bytes(u64(mem, "model_bytes")).c_str());
  if (const auto budget = u64(mem, "budget_bytes"); budget > 0)
    std::printf(", budget %s (%s used)", human_bytes(budget).c_str(), human_bytes(u64(mem, "budget_used_bytes")).c_str());
  std::printf("\n");
  for (const auto& d : r.value("devices", json::array())) {
    if (!d.is_object()) continue;
    std::string names;
    for (const auto& n : d.value("models", json::array()))
      if (n.is_string()) names += (names.empty() ? "" : ", ") + n.get<std::string>();
    std::printf("  %s: %s in models%s%s", cell(d, "device").c_str(), human_bytes(u64(d, "model_bytes")).c_str(),
                names.empty() ? "" : " (", names.empty() ? "" : (names + ")").c_str());
    if (d.contains("total_bytes"))
      std::printf(", %s of %s available", human_bytes(u64(d, "available_bytes")).c_str(),
                  human_bytes(u64(d, "total_bytes")).c_str());
    std::printf("\n");
  }
  std::printf("models: %zu, %zu resident\n", models.size(), resident);
}

void show_loaded(const char* verb, const json& r) {
  const auto m = r.value("model", json::object());
  std::printf("%s '%s': %s on %s, %s file, %s cache, %s tokens of context\n", verb, cell(r, "name").c_str(),
              cell(m, "arch").c_str(), cell(m, "backend").c_str(), human_bytes(u64(m, "file_bytes")).c_str(),
              human_bytes(u64(m, "cache_bytes")).c_str(), cell(m, "n_ctx").c_str());
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
  std::optional<double> keep_alive;
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
  json req = {{"op", "tokenize"}, {"text", src->prompt}, {"add_special", !o.no_special}};
  if (!src->model.empty()) req["model"] = src->model;
  return one_call(g, std::move(req), [](const json& r) {
    std::string line;
    for (const auto& t : r.value("tokens", json::array())) line += (line.empty() ? "" : " ") + t.dump();
    std::printf("%s\n", line.c_str());
  });
}

// A command that is one request without arguments (`ps` asks for `models`, shown differently).
void add_simple(CLI::App& app, const global_options& g, action& act, const char* name, const char* op,
                const char* help, std::function<void(const json&)> show) {
  auto* cmd = app.add_subcommand(name, help);
  cmd->callback([&g, &act, op, show] { act = [&g, op, show] { return one_call(g, {{"op", op}}, show); }; });
}

}  // namespace

void add_admin_commands(CLI::App& app, const global_options& g, action& act) {
  add_simple(app, g, act, "ps", "models", "List loaded models with their memory, backend and state", show_ps);
  add_simple(app, g, act, "models", "models", "List every model alias the daemon knows", show_models);
  add_simple(app, g, act, "status", "status", "Show the daemon's version, uptime, load and memory", show_status);
  auto o = std::make_shared<admin_options>();

  auto* load = app.add_subcommand("load", "Load a GGUF file under a new alias");
  load->add_option("name", o->name, "Alias to create")->required();
  load->add_option("path", o->path, "GGUF file (relative paths are taken from here)")->required();
  load->add_option("--keep-alive", o->keep_alive, "Idle seconds before it is unloaded (0: never)")
      ->check(CLI::Range(0.0, 1e9));
  load->callback([&g, &act, o] {
    act = [&g, o] {
      if (int rc = check_name(o->name)) return rc;
      json req = {{"op", "load"}, {"name", o->name}, {"path", absolute_path(o->path)}};
      if (o->keep_alive) req["keep_alive"] = *o->keep_alive;
      return one_call(g, std::move(req), [](const json& r) { show_loaded("loaded", r); }, "loading " + o->name);
    };
  });

  auto* swap = app.add_subcommand("swap", "Point an alias at another GGUF file without dropping requests");
  swap->add_option("name", o->name, "Alias to repoint")->required();
  swap->add_option("path", o->path, "The new GGUF file")->required();
  swap->callback([&g, &act, o] {
    act = [&g, o] {
      if (int rc = check_name(o->name)) return rc;
      json req = {{"op", "swap"}, {"name", o->name}, {"path", absolute_path(o->path)}};
      return one_call(g, std::move(req), [](const json& r) { show_loaded("swapped", r); }, "loading " + o->path);
    };
  });

  auto* unload = app.add_subcommand("unload", "Remove an alias; requests already accepted still finish");
  unload->add_option("name", o->name, "Alias to remove")->required();
  unload->callback([&g, &act, o] {
    act = [&g, o] {
      if (int rc = check_name(o->name)) return rc;
      return one_call(g, {{"op", "unload"}, {"name", o->name}},
                      [](const json& r) { std::printf("unloaded '%s'\n", cell(r, "name").c_str()); });
    };
  });

  auto* tok = app.add_subcommand("tokenize", "Show the token ids a model gives a text");
  tok->add_option("args", o->args, "[MODEL] TEXT; the text may come on stdin instead");
  tok->add_option("-m,--model", o->model, "Model alias (default: the daemon's default model)");
  tok->add_flag("--no-special", o->no_special, "Do not add BOS or other special tokens");
  tok->callback([&g, &act, o] { act = [&g, o] { return run_tokenize(g, *o); }; });
}

}  // namespace tandem::client
