// Generation requests shared by `tandem run` and `tandem chat`: the sampling flags, and streaming
// one generate request with Ctrl-C turned into a protocol `cancel`.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "daemon_client.h"
#include "failure.h"

namespace tandem::client {

// Flags left unset are not sent, so the daemon's defaults (tandem-protocol(7)) apply.
struct sampling_flags {
  std::optional<double> temperature;
  std::optional<std::uint32_t> top_k;
  std::optional<double> top_p;
  std::optional<double> min_p;
  std::optional<double> repeat_penalty;
  std::optional<std::uint64_t> seed;
  std::optional<std::uint32_t> max_tokens;
  std::vector<std::string> stop;
};

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed, -n/--max-tokens, --stop.
void add_sampling_flags(CLI::App& cmd, sampling_flags& f);

// Copies the set flags into a generate request.
void apply_sampling(const sampling_flags& f, nlohmann::json& request);

struct generation {
  nlohmann::json result;  // the final reply's result (finish_reason, token counts, rates)
  std::string text;       // everything streamed
  bool interrupted = false;
};

struct stream_options {
  bool json = false;             // print every reply as a JSON line instead of the text
  std::string waiting_label;     // spinner text until the first chunk (terminal only)
  std::function<void(const std::string&)> on_text;  // each chunk, in order (text mode)
};

// Sends `request` (op generate, streamed) and follows it to its final reply. Ctrl-C sends
// `cancel` and waits a little for the daemon to end the generation; `interrupted` is then set.
outcome<generation> stream_generation(daemon_client& c, nlohmann::json request, const stream_options& opt);

// "12 tokens in 0.8s (15.0 tok/s), prompt 5 tokens (120.0 tok/s), finish: length".
std::string describe_stats(const nlohmann::json& result);

}  // namespace tandem::client
