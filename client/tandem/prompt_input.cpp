// Prompt resolution for `tandem run`; kept free of I/O (the caller reads stdin) so it is testable.
#include "prompt_input.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "protocol/request.h"

namespace tandem::client {

bool stdin_is_piped() {
  struct stat st {};
  if (fstat(STDIN_FILENO, &st) != 0) return false;
  return S_ISFIFO(st.st_mode) || S_ISREG(st.st_mode) || S_ISSOCK(st.st_mode);
}

outcome<std::string> read_all_stdin() {
  std::string text;
  char buf[65536];
  for (;;) {
    const auto n = read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failure{exit_status::usage, std::string("reading stdin: ") + std::strerror(errno)};
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

namespace {

outcome<prompt_source> checked(prompt_source s) {
  if (!s.model.empty() && !proto::valid_model_name(s.model))
    return failure{exit_status::usage, "'" + s.model + "' is not a model name (1-64 of A-Z a-z 0-9 . _ : -)"};
  if (s.prompt.empty())
    return failure{exit_status::usage, "the prompt is empty: give it as an argument or pipe it on stdin"};
  return s;
}

}  // namespace

outcome<prompt_source> resolve_prompt(const std::vector<std::string>& args, const std::string& model_flag,
                                      const std::optional<std::string>& stdin_text) {
  if (args.size() > 2)
    return failure{exit_status::usage, "too many arguments: expected [MODEL] PROMPT (quote the prompt)"};
  if (args.size() == 2) {
    if (!model_flag.empty()) return failure{exit_status::usage, "the model is given twice (-m and MODEL)"};
    return checked({args[0], args[1]});
  }
  const bool piped = stdin_text && !stdin_text->empty();
  if (args.size() == 1) {
    if (!piped) return checked({model_flag, args[0]});
    if (model_flag.empty() && proto::valid_model_name(args[0])) return checked({args[0], *stdin_text});
    return checked({model_flag, args[0] + "\n\n" + *stdin_text});
  }
  if (!stdin_text)
    return failure{exit_status::usage, "no prompt: give it as an argument or pipe it on stdin"};
  return checked({model_flag, *stdin_text});
}

}  // namespace tandem::client
