// Generation requests shared by `tandem run` and `tandem chat`: the sampling flags, and streaming
// one generate request through libtandem-client with Ctrl-C turned into a protocol `cancel`.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "failure.h"
#include "tandem/client.h"

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
void apply_sampling(const sampling_flags& f, generate_request& request);

struct stream_options {
  bool json = false;             // print every reply as a JSON line instead of the text
  std::string waiting_label;     // spinner text until the first chunk (terminal only)
  std::function<void(const std::string&)> on_text;  // each chunk, in order (text mode)
};

// Streams `request` to its final reply. Ctrl-C sends `cancel` and waits a little for the daemon
// to end the generation; the result's cancel_sent then says it was interrupted.
outcome<generate_result> stream_generation(connection& c, const generate_request& request,
                                           const stream_options& opt);

// stream_generation with opt.on_text writing each chunk to stdout as it arrives. A reply that does
// not end with a newline gets one afterwards, on an error too, so what follows starts a line.
outcome<generate_result> stream_to_stdout(connection& c, const generate_request& request, stream_options opt);

// "12 tokens in 0.8s (15.0 tok/s), prompt 5 tokens (120.0 tok/s), finish: length".
std::string describe_stats(const generate_result& result);

}  // namespace tandem::client
