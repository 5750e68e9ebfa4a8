// Shared by tandem and tandem-model: the first word on a command line that should name a
// subcommand but names none, so that "tandem frobnicate" says so instead of CLI11's "A
// subcommand is required".
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace tandem {

// The first argument that is neither an option (nor an option's value) nor one of app's
// subcommands; nullopt when the first such word is a subcommand or there is none.
inline std::optional<std::string> unknown_subcommand(CLI::App& app, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") return std::nullopt;
    if (a.size() > 1 && a[0] == '-') {
      // An option of the top level that takes a value in the next argument ("--socket PATH").
      if (a.find('=') == std::string::npos) {
        const CLI::Option* o = app.get_option_no_throw(a);
        if (o && o->get_items_expected_min() > 0) ++i;
      }
      continue;
    }
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      if (sub->check_name(a)) return std::nullopt;
    return a;
  }
  return std::nullopt;
}

// "run, chat, ps" for the message.
inline std::string subcommand_names(const CLI::App& app) {
  std::string out;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    out += (out.empty() ? "" : ", ") + s->get_name();
  return out;
}

}  // namespace tandem
