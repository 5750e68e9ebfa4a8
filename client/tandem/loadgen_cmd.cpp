// tandem loadgen: N concurrent clients stream generate requests to tandemd and the time to first
// chunk, the gaps between chunks and the token rates are reported (the figures: load_stats.h).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "commands.h"
#include "connect.h"
#include "load_stats.h"
#include "output.h"
#include "protocol/request.h"

namespace tandem::client {
namespace {

using json = nlohmann::json;  // the --json summary
using steady = std::chrono::steady_clock;

struct loadgen_options {
  std::string model;  // empty: the daemon's default alias
  unsigned clients = 4;
  std::optional<std::uint64_t> requests;  // default: one per client
  std::uint32_t max_tokens = 128;
  std::string prompt = "Write a short story about a lighthouse keeper.";
  bool same_prompt = false;
  bool raw = false;
  double temperature = 0;
  double timeout_s = 0;  // per request; 0: wait as long as it takes
  double duration_s = 0;  // > 0: no request starts after this many seconds
};

double seconds_since(steady::time_point t0) { return std::chrono::duration<double>(steady::now() - t0).count(); }

// Request `i` (0-based). Distinct prompts by default, so that a daemon that reuses cached
// prefixes cannot serve every request from one cache entry unless asked to (--same-prompt).
generate_request build_request(const loadgen_options& o, std::uint64_t i) {
  const std::string text = o.same_prompt ? o.prompt : o.prompt + " (request " + std::to_string(i + 1) + ")";
  generate_request req;
  req.model = o.model;
  req.max_tokens = o.max_tokens;
  req.temperature = o.temperature;
  if (o.raw) req.prompt = text;
  else req.messages = {{"user", text}};
  return req;
}

// --timeout on a connection: every request on it must end within it (rounded up to 1 ms, so
// that a tiny timeout never means "none").
void apply_timeout(connection& c, double timeout_s) {
  if (timeout_s <= 0) return;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::chrono::duration<double>(timeout_s));
  c.set_timeout(std::max(ms, std::chrono::milliseconds(1)));
}

void take_result(const generate_result& result, request_sample& s) {
  s.ok = true;
  s.generated_tokens = result.generated_tokens;
  s.prompt_tokens = result.prompt_tokens;
  s.reused_tokens = result.reused_tokens;  // newer daemons only
  s.decode_tok_s = result.decode_tok_s;
}

// Streams one request on `c` into `s`. Returns false when the connection can no longer be used
// (broken, or a request still running on it after a timeout), so the caller reconnects.
bool stream_one(connection& c, const generate_request& req, double timeout_s, request_sample& s) {
  const auto t0 = steady::now();
  std::optional<steady::time_point> last_chunk;
  stream_handlers h;
  h.on_text = [&](std::string_view) {
    const auto now = steady::now();
    if (!last_chunk) s.ttft_s = std::chrono::duration<double>(now - t0).count();
    else s.gaps_s.push_back(std::chrono::duration<double>(now - *last_chunk).count());
    last_chunk = now;
  };
  auto r = c.generate(req, h);
  if (r.ok()) {
    take_result(*r, s);
    return true;
  }
  failure f = to_failure(r.err());
  if (r.err().kind == error_kind::timeout) {
    char msg[96];
    std::snprintf(msg, sizeof msg, "no final reply within %g s (--timeout)", timeout_s);
    f = {exit_status::protocol, msg};
  }
  s.status = f.status;
  s.error = f.message;
  return c.usable();  // a daemon's error reply leaves it usable
}

// The clients share one counter of requests handed out and one list of samples, appended in
// the order requests finish (so the "first" failure is the first to happen).
class load_run {
 public:
  load_run(const global_options& g, const loadgen_options& o, std::uint64_t total, steady::time_point t0)
      : g_(g), o_(o), total_(total), t0_(t0) {}

  // One client: takes request numbers until none are left or --duration has passed (a request
  // already running then still finishes). A connection that broke is opened again for the next
  // request; a failed connect fails that request only.
  void client(std::optional<connection> c) {
    for (std::uint64_t i; !out_of_time() && (i = next_.fetch_add(1)) < total_;) {
      request_sample s;
      if (!c) {
        auto fresh = connect_to_daemon(g_.socket);
        if (fresh.ok()) {
          c.emplace(std::move(*fresh));
          apply_timeout(*c, o_.timeout_s);
        } else {
          s.status = fresh.fail().status;
          s.error = fresh.fail().message;
        }
      }
      if (c && !stream_one(*c, build_request(o_, i), o_.timeout_s, s)) c.reset();
      std::lock_guard lock(mu_);
      samples_.push_back(std::move(s));
    }
  }

  // Safe only once every client thread has been joined.
  const std::vector<request_sample>& samples() const { return samples_; }

 private:
  bool out_of_time() const { return o_.duration_s > 0 && seconds_since(t0_) >= o_.duration_s; }

  const global_options& g_;
  const loadgen_options& o_;
  const std::uint64_t total_;
  const steady::time_point t0_;
  std::atomic<std::uint64_t> next_{0};
  std::mutex mu_;
  std::vector<request_sample> samples_;
};

json opt_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json summary_json(const load_summary& s, std::size_t clients) {
  json j = {{"clients", clients},
            {"requests", s.requests},
            {"failures", s.failures},
            {"wall_seconds", s.wall_s},
            {"generated_tokens", s.generated_tokens},
            {"prompt_tokens", s.prompt_tokens},
            {"aggregate_decode_tok_s", s.aggregate_tok_s},
            {"mean_request_decode_tok_s", opt_json(s.mean_request_tok_s)},
            {"ttft_p50_ms", opt_json(s.ttft_p50_ms)},
            {"ttft_p99_ms", opt_json(s.ttft_p99_ms)},
            {"itl_p50_ms", opt_json(s.itl_p50_ms)},
            {"itl_p99_ms", opt_json(s.itl_p99_ms)}};
  if (s.reused_tokens) j["reused_tokens"] = *s.reused_tokens;
  if (s.failures) j["first_error"] = s.first_error;
  return j;
}

std::string fixed(const std::optional<double>& v, const char* unit) {
  if (!v) return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f %s", *v, unit);
  return buf;
}

void print_summary(const load_summary& s, std::size_t clients) {
  std::printf("clients %zu, requests %zu, failures %zu, wall %.2f s\n", clients, s.requests, s.failures, s.wall_s);
  std::printf("tokens: %llu generated, %llu prompt", static_cast<unsigned long long>(s.generated_tokens),
              static_cast<unsigned long long>(s.prompt_tokens));
  if (s.reused_tokens) std::printf(", %llu reused", static_cast<unsigned long long>(*s.reused_tokens));
  std::printf("\ndecode: %.1f tok/s aggregate, %s mean per request\n", s.aggregate_tok_s,
              fixed(s.mean_request_tok_s, "tok/s").c_str());
  std::printf("time to first chunk: p50 %s, p99 %s\n", fixed(s.ttft_p50_ms, "ms").c_str(),
              fixed(s.ttft_p99_ms, "ms").c_str());
  std::printf("inter-token latency: p50 %s, p99 %s\n", fixed(s.itl_p50_ms, "ms").c_str(),
              fixed(s.itl_p99_ms, "ms").c_str());
  std::fflush(stdout);
}

int loadgen(const global_options& g, const loadgen_options& o) {
  if (!o.model.empty() && !proto::valid_model_name(o.model))
    return report({exit_status::usage, "'" + o.model + "' is not a model name (1-64 of A-Z a-z 0-9 . _ : -)"});
  if (o.prompt.empty()) return report({exit_status::usage, "the prompt is empty"});
  // With --duration alone the clock ends the run, not a request count.
  const std::uint64_t total = o.requests.value_or(o.duration_s > 0 ? UINT64_MAX : o.clients);
  // More clients than requests would only hold idle connections.
  const auto clients = static_cast<std::size_t>(std::min<std::uint64_t>(o.clients, total));
  // Connect every client before the clock starts: a daemon that is not there is one clear
  // error, and connection set-up is not part of what is measured.
  std::vector<std::optional<connection>> conns;
  for (std::size_t i = 0; i < clients; ++i) {
    auto c = connect_to_daemon(g.socket);
    if (!c.ok()) return report(c.fail());
    apply_timeout(*c, o.timeout_s);
    conns.emplace_back(std::move(*c));
  }
  const auto t0 = steady::now();
  load_run run(g, o, total, t0);
  std::vector<std::thread> threads;
  for (auto& c : conns) threads.emplace_back([&run, &c] { run.client(std::move(c)); });
  for (auto& t : threads) t.join();
  const auto s = summarize(run.samples(), seconds_since(t0));

  if (g.json) print_json_line(summary_json(s, clients));
  else print_summary(s, clients);
  if (s.failures == 0) return to_int(exit_status::ok);
  return report({s.first_status, std::to_string(s.failures) + " of " + std::to_string(s.requests) +
                                     " requests failed; the first: " + s.first_error});
}

}  // namespace

void add_loadgen_command(CLI::App& app, const global_options& g, action& act) {
  auto o = std::make_shared<loadgen_options>();
  auto* cmd = app.add_subcommand("loadgen", "Measure the daemon under concurrent streamed generations");
  cmd->add_option("-m,--model", o->model, "Model alias (default: the daemon's default model)");
  cmd->add_option("-c,--clients", o->clients, "Concurrent clients, each on its own connection")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("-r,--requests", o->requests,
                  "Requests in all, shared by the clients (default: one per client; none with --duration)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 32));
  cmd->add_option("-n,--max-tokens", o->max_tokens, "Most tokens to generate per request")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  cmd->add_option("-p,--prompt", o->prompt, "The prompt; each request appends \" (request I)\"")->capture_default_str();
  cmd->add_flag("--same-prompt", o->same_prompt, "Send the prompt unchanged with every request");
  cmd->add_flag("--raw", o->raw, "Send the prompt as is, without the model's chat template");
  cmd->add_option("--temp,--temperature", o->temperature, "Sampling temperature, 0 = greedy")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  cmd->add_option("--timeout", o->timeout_s, "Seconds one request may take, 0 = no limit")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--duration", o->duration_s, "Seconds after which no request starts, 0 = none (running ones finish)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->callback([&g, &act, o] { act = [&g, o] { return loadgen(g, *o); }; });
}

}  // namespace tandem::client
