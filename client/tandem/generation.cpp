// Streaming generation with cancel-on-Ctrl-C: the library does the protocol; here are the
// spinner, the JSON lines and the routing of SIGINT to the running request.
#include "generation.h"

#include <cstdio>

#include "connect.h"
#include "interrupt.h"
#include "output.h"
#include "spinner.h"

namespace tandem::client {

void add_sampling_flags(CLI::App& cmd, sampling_flags& f) {
  cmd.add_option("--temp,--temperature", f.temperature, "Sampling temperature, 0 = greedy (daemon default 0.8)")
      ->check(CLI::Range(0.0, 100.0));
  cmd.add_option("--top-k", f.top_k, "Keep the K most likely tokens, 0 = all (default 40)")
      ->check(CLI::Range(0u, 1u << 20));
  cmd.add_option("--top-p", f.top_p, "Nucleus sampling threshold (default 0.95)")->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--min-p", f.min_p, "Drop tokens below this fraction of the best (default 0.05)")
      ->check(CLI::Range(0.0, 1.0));
  cmd.add_option("--repeat-penalty", f.repeat_penalty, "Penalty for repeated tokens (default 1 = off)")
      ->check(CLI::Range(0.01, 100.0));
  cmd.add_option("--seed", f.seed, "Random seed, for repeatable sampling");
  cmd.add_option("-n,--max-tokens", f.max_tokens, "Most tokens to generate (default 256)")
      ->check(CLI::Range(1u, 1u << 20));
  cmd.add_option("--stop", f.stop, "Stop when this text is generated (repeatable, at most 16)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void apply_sampling(const sampling_flags& f, generate_request& r) {
  r.temperature = f.temperature;
  r.top_k = f.top_k;
  r.top_p = f.top_p;
  r.min_p = f.min_p;
  r.repeat_penalty = f.repeat_penalty;
  r.seed = f.seed;
  r.max_tokens = f.max_tokens;
  r.stop = f.stop;
}

outcome<generate_result> stream_generation(connection& c, const generate_request& request,
                                           const stream_options& opt) {
  std::optional<spinner> wait;
  if (!opt.json && !opt.waiting_label.empty()) wait.emplace(opt.waiting_label);
  stream_handlers h;
  h.on_cancel_sent = [&wait] {
    if (wait) wait->stop();
  };
  h.on_reply = [&wait, &opt](std::string_view reply) {
    if (wait) wait->stop();
    if (opt.json) print_json_text(reply);
  };
  if (!opt.json && opt.on_text) h.on_text = [&opt](std::string_view t) { opt.on_text(std::string(t)); };
  // Routed for the whole call: a Ctrl-C while waiting for a model to load cancels too.
  interrupt_route route(c);
  return to_outcome(c.generate(request, h));
}

outcome<generate_result> stream_to_stdout(connection& c, const generate_request& request, stream_options opt) {
  bool mid_line = false;  // the text so far does not end with a newline
  opt.on_text = [&mid_line](const std::string& t) {
    std::fwrite(t.data(), 1, t.size(), stdout);
    std::fflush(stdout);
    if (!t.empty()) mid_line = t.back() != '\n';
  };
  auto gen = stream_generation(c, request, opt);
  if (mid_line) std::fputc('\n', stdout);
  return gen;
}

std::string describe_stats(const generate_result& r) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%.0f tokens in %.2fs (%.1f tok/s), prompt %.0f tokens (%.0f reused, %.1f tok/s), "
                "first token after %.3fs, finish: %s",
                static_cast<double>(r.generated_tokens), r.prefill_seconds + r.decode_seconds, r.decode_tok_s,
                static_cast<double>(r.prompt_tokens), static_cast<double>(r.reused_tokens.value_or(0)),
                r.prefill_tok_s, r.first_token_seconds, r.finish_reason.empty() ? "-" : r.finish_reason.c_str());
  return buf;
}

}  // namespace tandem::client
