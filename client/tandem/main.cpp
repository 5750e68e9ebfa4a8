// tandem: the command-line client of tandemd (tandem(1)). Parses the command line, then runs the
// chosen subcommand; every outcome maps to one of the exit statuses in failure.h.
#include <cstdio>
#include <cstdlib>
#include <exception>

#include <CLI/CLI.hpp>

#include "../cli_args.h"
#include "commands.h"
#include "config/daemon_config.h"
#include "failure.h"

int main(int argc, char** argv) {
  using namespace tandem::client;
  CLI::App app{"tandem: talk to the tandemd LLM daemon", "tandem"};
  app.require_subcommand(1);
  app.fallthrough();  // --json and --socket may also follow the subcommand
  app.set_version_flag("--version", std::string("tandem ") + TANDEM_VERSION);
  app.footer("Exit status: 0 ok, 1 cannot connect, 2 usage, 3 server error, 4 busy, 5 no such model,\n"
             "6 load failed, 7 not allowed, 8 protocol error, 130 interrupted. See tandem(1).");

  global_options g;
  // One source of truth for the default: the daemon's own configuration default.
  g.socket = tandem::daemon::daemon_config{}.socket_path;
  app.add_option("--socket", g.socket, "tandemd's Unix socket")->envname("TANDEM_SOCKET")->capture_default_str();
  app.add_flag("--json", g.json, "Machine-readable output: one JSON object per line");

  action act;
  add_run_command(app, g, act);
  add_chat_command(app, g, act);
  add_admin_commands(app, g, act);
  add_loadgen_command(app, g, act);

  if (auto bad = tandem::unknown_subcommand(app, argc, argv))
    return report({exit_status::usage, "unknown command '" + *bad + "'; commands: " + tandem::subcommand_names(app)});
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error is exit_status::usage, whatever CLI11 would use.
    return app.exit(e) == 0 ? 0 : to_int(exit_status::usage);
  }
  if (!act) return report({exit_status::usage, "no command given; see tandem --help"});
  try {
    return act();
  } catch (const std::exception& e) {
    // Not expected (allocation failure, a library throwing): still a clean message and status.
    return report({exit_status::protocol, std::string("internal error: ") + e.what()});
  }
}
