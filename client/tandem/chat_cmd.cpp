// tandem chat [MODEL]: an interactive conversation. The history is kept here as chat messages and
// sent whole with every turn (the daemon renders it with the model's chat template).
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "commands.h"
#include "connect.h"
#include "generation.h"
#include "interrupt.h"
#include "line_reader.h"
#include "protocol/request.h"

namespace tandem::client {
namespace {

struct chat_options {
  std::vector<std::string> args;
  std::string system;
  bool verbose = false;
  sampling_flags sampling;
};

constexpr const char* help_text =
    "  /bye          leave (Ctrl-D does too)\n"
    "  /clear        forget the conversation so far\n"
    "  /model [NAME] show or change the model\n"
    "  /help         this list\n"
    "  Ctrl-C stops a reply that is being written.\n";

class chat_session {
 public:
  chat_session(const global_options& g, const chat_options& o, connection& c, std::string model)
      : g_(g), o_(o), c_(c), model_(std::move(model)), interactive_(isatty(STDIN_FILENO)) {
    clear();
  }

  int loop();

 private:
  // Returns an exit status to end the session with, or nullopt to carry on.
  std::optional<int> command(const std::string& line);
  std::optional<int> turn(const std::string& text);
  void clear();
  void say(const char* text) const {
    if (interactive_) std::fputs(text, stdout);
    std::fflush(stdout);
  }

  const global_options& g_;
  const chat_options& o_;
  connection& c_;
  std::string model_;
  bool interactive_;
  std::vector<chat_message> history_;
};

void chat_session::clear() {
  history_.clear();
  if (!o_.system.empty()) history_.push_back({"system", o_.system});
}

int chat_session::loop() {
  if (interactive_ && !g_.json)
    std::printf("Chatting with %s. /help lists commands; /bye or Ctrl-D leaves.\n",
                model_.empty() ? "the default model" : ("'" + model_ + "'").c_str());
  line_reader in;
  std::string line;
  for (;;) {
    if (!g_.json) say(">>> ");
    const auto st = in.next(line);
    if (st == line_reader::status::eof) {
      say("\n");
      return 0;
    }
    if (st == line_reader::status::error) return report({exit_status::usage, in.error_message()});
    if (st == line_reader::status::interrupted) {
      say("\n(Ctrl-C: use /bye or Ctrl-D to leave)\n");
      continue;
    }
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    auto r = line[first] == '/' ? command(line.substr(first)) : turn(line);
    if (r) return *r;
  }
}

std::optional<int> chat_session::command(const std::string& line) {
  const auto sp = line.find(' ');
  const std::string name = line.substr(0, sp);
  std::string arg = sp == std::string::npos ? "" : line.substr(sp + 1);
  while (!arg.empty() && (arg.back() == ' ' || arg.back() == '\t')) arg.pop_back();
  if (name == "/bye" || name == "/exit" || name == "/quit") return 0;
  if (name == "/help" || name == "/?") {
    std::fputs(help_text, stdout);
  } else if (name == "/clear") {
    clear();
    std::printf("(conversation cleared)\n");
  } else if (name == "/model" && arg.empty()) {
    std::printf("model: %s\n", model_.empty() ? "(the default model)" : model_.c_str());
  } else if (name == "/model") {
    if (!proto::valid_model_name(arg)) {
      std::printf("'%s' is not a model name\n", arg.c_str());
      return std::nullopt;
    }
    auto models = c_.models();
    if (!models.ok()) return report(to_failure(models.err()));
    bool known = false;
    for (const auto& m : models->models)
      if (m.name == arg) known = true;
    if (!known) std::printf("no model named '%s' (tandem models lists them)\n", arg.c_str());
    else {
      model_ = arg;
      std::printf("(now chatting with '%s'; the conversation is kept)\n", model_.c_str());
    }
  } else {
    std::printf("unknown command %s; /help lists them\n", name.c_str());
  }
  std::fflush(stdout);
  return std::nullopt;
}

std::optional<int> chat_session::turn(const std::string& text) {
  history_.push_back({"user", text});
  generate_request req;
  req.messages = history_;
  req.model = model_;
  apply_sampling(o_.sampling, req);
  stream_options so;
  so.json = g_.json;
  so.waiting_label = "thinking";
  auto gen = stream_to_stdout(c_, req, so);
  if (!gen.ok()) {
    history_.pop_back();  // the turn did not happen
    const auto st = gen.fail().status;
    const int code = report(gen.fail());
    // A dead connection ends the session; so does any error when a script drives it.
    if (!interactive_ || st == exit_status::protocol || st == exit_status::interrupted) return code;
    return std::nullopt;
  }
  // What was shown is what the model said, even when Ctrl-C cut it short.
  history_.push_back({"assistant", gen->text});
  if (o_.verbose) std::fprintf(stderr, "%s\n", describe_stats(*gen).c_str());
  if (gen->cancel_sent && !g_.json) std::printf("(stopped)\n");
  std::fflush(stdout);
  return std::nullopt;
}

int run(const global_options& g, const chat_options& o) {
  if (o.args.size() > 1) return report({exit_status::usage, "chat takes at most one MODEL argument"});
  const std::string model = o.args.empty() ? "" : o.args[0];
  if (!model.empty() && !proto::valid_model_name(model))
    return report({exit_status::usage, "'" + model + "' is not a model name (1-64 of A-Z a-z 0-9 . _ : -)"});
  auto c = connect_to_daemon(g.socket);
  if (!c.ok()) return report(c.fail());
  install_interrupt_handler();
  chat_session s(g, o, *c, model);
  return s.loop();
}

}  // namespace

void add_chat_command(CLI::App& app, const global_options& g, action& act) {
  auto o = std::make_shared<chat_options>();
  auto* cmd = app.add_subcommand("chat", "Talk with a model; each line you type is one message");
  cmd->add_option("model", o->args, "Model alias (default: the daemon's default model)");
  cmd->add_option("--system", o->system, "System message that starts the conversation");
  cmd->add_flag("-v,--verbose", o->verbose, "Print token counts and speed on stderr after each reply");
  add_sampling_flags(*cmd, o->sampling);
  cmd->callback([&g, &act, o] { act = [&g, o] { return run(g, *o); }; });
}

}  // namespace tandem::client
