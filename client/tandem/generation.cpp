// Streaming generation with cancel-on-Ctrl-C.
#include "generation.h"

#include <cstdio>

#include "interrupt.h"
#include "output.h"
#include "spinner.h"

namespace tandem::client {
namespace {

// How long a cancelled generation may take to end before we stop waiting (closing the
// connection cancels it on the daemon's side anyway; prefill is not interruptible).
constexpr int cancel_wait_ms = 3000;

}  // namespace

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

void apply_sampling(const sampling_flags& f, nlohmann::json& r) {
  if (f.temperature) r["temperature"] = *f.temperature;
  if (f.top_k) r["top_k"] = *f.top_k;
  if (f.top_p) r["top_p"] = *f.top_p;
  if (f.min_p) r["min_p"] = *f.min_p;
  if (f.repeat_penalty) r["repeat_penalty"] = *f.repeat_penalty;
  if (f.seed) r["seed"] = *f.seed;
  if (f.max_tokens) r["max_tokens"] = *f.max_tokens;
  if (!f.stop.empty()) r["stop"] = f.stop;
}

outcome<generation> stream_generation(daemon_client& c, nlohmann::json request, const stream_options& opt) {
  const auto id = c.next_id();
  request["id"] = id;
  request["op"] = "generate";
  request["stream"] = true;
  std::optional<spinner> wait;
  if (!opt.json && !opt.waiting_label.empty()) wait.emplace(opt.waiting_label);
  if (auto f = c.send(request)) return *f;

  generation g;
  bool cancel_sent = false;
  for (;;) {
    auto r = cancel_sent ? c.receive(true, cancel_wait_ms) : c.receive(true);
    if (!r.ok()) {
      if (r.fail().status == exit_status::interrupted && !cancel_sent) {
        if (wait) wait->stop();
        if (auto f = c.send({{"id", c.next_id()}, {"op", "cancel"}, {"target", id}})) return *f;
        cancel_sent = true;
        g.interrupted = true;
        continue;
      }
      // A second Ctrl-C, or the daemon is slow to stop: give up; closing the socket cancels.
      if (cancel_sent) return failure{exit_status::interrupted, "interrupted"};
      return r.fail();
    }
    const auto& reply = *r;
    if (reply["id"] != id) continue;  // the cancel's own reply
    if (wait) wait->stop();
    if (opt.json) print_json_line(reply);
    if (reply.contains("error")) return reply_failure(reply);
    if (reply.contains("chunk") && reply["chunk"].is_string()) {
      const auto& text = reply["chunk"].get_ref<const std::string&>();
      g.text += text;
      if (!opt.json && opt.on_text) opt.on_text(text);
      continue;
    }
    if (!reply.contains("result") || !reply["result"].is_object())
      return failure{exit_status::protocol, "generate: reply without chunk, result or error"};
    g.result = reply["result"];
    return g;
  }
}

std::string describe_stats(const nlohmann::json& r) {
  auto num = [&](const char* k) { return r.contains(k) && r[k].is_number() ? r[k].get<double>() : 0.0; };
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%.0f tokens in %.2fs (%.1f tok/s), prompt %.0f tokens (%.0f reused, %.1f tok/s), "
                "first token after %.3fs, finish: %s",
                num("generated_tokens"), num("prefill_seconds") + num("decode_seconds"), num("decode_tok_s"),
                num("prompt_tokens"), num("reused_tokens"), num("prefill_tok_s"), num("first_token_seconds"),
                cell(r, "finish_reason").c_str());
  return buf;
}

}  // namespace tandem::client
