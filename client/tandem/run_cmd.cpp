// tandem run [MODEL] PROMPT: one generation, streamed to stdout as it arrives.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "connect.h"
#include "generation.h"
#include "interrupt.h"
#include "prompt_input.h"

namespace tandem::client {
namespace {

struct run_options {
  std::vector<std::string> args;
  std::string model;
  std::string system;
  bool raw = false;
  bool verbose = false;
  sampling_flags sampling;
};

outcome<generate_request> build_request(const global_options&, const run_options& o) {
  std::optional<std::string> piped;
  if (o.args.size() < 2 && stdin_is_piped()) {
    auto t = read_all_stdin();
    if (!t.ok()) return t.fail();
    piped = std::move(*t);
  }
  auto src = resolve_prompt(o.args, o.model, piped);
  if (!src.ok()) return src.fail();
  generate_request req;
  req.model = src->model;
  if (o.raw) {
    if (!o.system.empty()) return failure{exit_status::usage, "--system needs the chat template (drop --raw)"};
    req.prompt = src->prompt;
  } else {
    if (!o.system.empty()) req.messages.push_back({"system", o.system});
    req.messages.push_back({"user", src->prompt});
  }
  apply_sampling(o.sampling, req);
  return req;
}

int run(const global_options& g, const run_options& o) {
  auto req = build_request(g, o);
  if (!req.ok()) return report(req.fail());
  auto c = connect_to_daemon(g.socket);
  if (!c.ok()) return report(c.fail());
  install_interrupt_handler();

  stream_options so;
  so.json = g.json;
  so.waiting_label = "waiting for " + (req->model.empty() ? std::string("the default model") : "'" + req->model + "'");
  auto gen = stream_to_stdout(*c, *req, so);
  if (!gen.ok()) return report(gen.fail());
  std::fflush(stdout);
  if (o.verbose) std::fprintf(stderr, "%s\n", describe_stats(*gen).c_str());
  return to_int(gen->cancel_sent ? exit_status::interrupted : exit_status::ok);
}

}  // namespace

void add_run_command(CLI::App& app, const global_options& g, action& act) {
  auto o = std::make_shared<run_options>();
  auto* cmd = app.add_subcommand("run", "Generate a reply to one prompt, streamed as it arrives");
  cmd->add_option("args", o->args, "[MODEL] PROMPT; the prompt may come on stdin instead");
  cmd->add_option("-m,--model", o->model, "Model alias (default: the daemon's default model)");
  cmd->add_option("--system", o->system, "System message put before the prompt");
  cmd->add_flag("--raw", o->raw, "Send the prompt as is, without the model's chat template");
  cmd->add_flag("-v,--verbose", o->verbose, "Print token counts and speed on stderr afterwards");
  add_sampling_flags(*cmd, o->sampling);
  cmd->callback([&g, &act, o] { act = [&g, o] { return run(g, *o); }; });
}

}  // namespace tandem::client
