// served_model: what the registry and the server need from a loaded model. The engine adapter
// (engine_model.h) is the only production implementation; unit tests of the registry's swap
// logic use a test double.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/load_progress.h"
#include "core/result.h"
#include "protocol/request.h"

namespace tandem::metrics {
class histogram;
}

namespace tandem::daemon {

// One generation, independent of the wire format.
struct generation_input {
  std::optional<std::string> prompt;           // raw text, tokenized as is
  std::vector<proto::chat_message> messages;   // used when prompt is absent: chat template
  proto::sampling_params sampling;
  std::uint32_t max_tokens = 256;
  std::vector<std::string> stop;
  // Where the gaps between successive tokens are observed as they come (seconds); nullptr: not
  // measured. Only the engine sees each token, so it measures them (metrics/token_gap_timer.h).
  metrics::histogram* token_gaps = nullptr;
};

struct generation_stats {
  std::string finish_reason;  // stop, length, context_limit, cancelled
  std::uint64_t prompt_tokens = 0;
  std::uint64_t reused_tokens = 0;  // prompt tokens whose KV a cached prefix already held
  std::uint64_t generated_tokens = 0;
  double setup_seconds = 0;         // before the engine took the request: file check, prompt encoding
  double first_token_seconds = 0;   // from the engine taking the request to its first token
  double prefill_seconds = 0;
  double decode_seconds = 0;
  std::string text;  // the whole generated text
};

// How a model's load went: the weight bytes the engine placed (its load_progress at the end) and
// the seconds the open took, so a slow disk or a slow upload shows in status after the fact.
struct load_record {
  std::uint64_t bytes = 0;
  double seconds = 0;
  double bytes_per_second() const { return seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0; }
};

struct model_info {
  std::string path;
  std::string arch;
  std::string backend;
  std::string device;             // where the weights and cache live: "cpu", "cuda:0", ...
  std::string kv_type;            // KV cache elements: f16, q8_0, f32
  std::uint64_t n_vocab = 0;
  std::uint64_t n_ctx = 0;         // tokens per sequence
  std::uint32_t parallel = 1;      // sequences decoded together
  std::uint64_t file_bytes = 0;   // mapped weights
  std::uint64_t cache_bytes = 0;  // KV cache storage, recurrent state included
  std::uint64_t state_bytes = 0;  // the part of cache_bytes that is hybrid models' recurrent state
  // Set by the registry once the load is done (the model itself does not know it).
  std::optional<load_record> load;
};

// A model's sequence slots and what they are doing, for status.
struct sequence_counts {
  std::uint32_t slots = 1;
  std::uint32_t running = 0;  // requests in a slot (prefilling or decoding)
  std::uint32_t waiting = 0;  // handed to the engine, not yet in a slot
  std::uint64_t prefix_hits = 0;
  std::uint64_t reused_tokens = 0;
};

// Receives text as it is produced; returning false cancels the generation.
using text_sink = std::function<bool(std::string_view)>;

class served_model {
 public:
  virtual ~served_model() = default;

  // Runs one generation to completion (or cancellation). Called from up to slots() worker
  // threads at once; the engine batches them.
  virtual result<generation_stats> generate(const generation_input& in, const text_sink& on_text) = 0;
  virtual unsigned slots() const { return 1; }
  virtual sequence_counts counts() const { return {}; }

  // Thread safe; may run beside generate.
  virtual result<std::vector<std::int32_t>> tokenize(std::string_view text, bool add_special) const = 0;
  virtual result<std::string> detokenize(std::span<const std::int32_t> ids) const = 0;

  virtual model_info info() const = 0;
  // Engine health for the systemd watchdog.
  virtual bool healthy() const { return true; }
  // The model's file changed on disk since it was loaded: the registry unloads it (a request
  // loads it again from the path).
  virtual bool stale() const { return false; }
};

// Loads a model file for an alias with its settings (its [model.NAME] table under the request's
// own options; unset ones take the global keys); the registry calls it on an admin thread. The
// loader reports the weight bytes it places to `progress`, which the registry keeps alive for
// the whole call and reads for status from other threads.
using model_loader = std::function<result<std::unique_ptr<served_model>>(
    const std::string& alias, const std::string& path, const proto::model_settings& settings,
    load_progress* progress)>;

// Predicts the bytes a load of `path` would hold (weights + KV cache) without loading it, so the
// memory budget can be checked before anything is allocated. Blocking (reads the file's header).
using model_sizer = std::function<result<std::uint64_t>(const std::string& alias, const std::string& path,
                                                         const proto::model_settings& settings)>;

}  // namespace tandem::daemon
