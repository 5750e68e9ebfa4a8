// The generation loop: prefill the prompt in chunks, then sample and decode one token at a time,
// streaming text as it becomes whole UTF-8, until a stop token, a stop string, max_tokens or the
// context limit.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"
#include "runtime/sampler.h"

namespace tandem {

struct generate_params {
  sampling_params sampling;
  int32_t max_tokens = 256;               // < 0: until a stop or the context limit
  std::vector<int32_t> stop_tokens;       // not emitted as text
  std::vector<std::string> stop_strings;  // text is cut before the first match
  uint32_t n_batch = 512;                 // prompt tokens per forward pass
  // Polled before every prefill pass and every decode step; true stops the generation with
  // stop_reason::cancelled, so a long prompt can be abandoned within one pass. Optional.
  std::function<bool()> cancelled;
};

enum class stop_reason { max_tokens, stop_token, stop_string, context_limit, cancelled };
std::string_view stop_reason_name(stop_reason r);

struct generate_result {
  std::vector<int32_t> tokens;  // generated ids, the stop token included if one ended it
  std::string text;             // everything passed to on_text
  stop_reason reason = stop_reason::max_tokens;
  size_t n_prompt = 0;
  size_t n_reused = 0;         // prompt tokens whose KV was already cached (prefix reuse)
  double first_token_seconds = 0;  // from submission (or the call) to the first token
  double prefill_seconds = 0;
  double decode_seconds = 0;  // sampling + decode passes after the first token
};

// Bytes of one token (may be part of a UTF-8 character); the tokenizer's token_bytes.
using token_text_fn = std::function<std::string(int32_t)>;
// Receives text as it is produced; returning false cancels.
using text_fn = std::function<bool(std::string_view)>;

// Clears sequence `seq` in the cache, prefills `prompt` and generates. Errors come from the
// backend (bad token ids, a prompt longer than the context) and leave no partial output.
// A greedy request (sampler::greedy) takes its tokens from be.forward_argmax.
result<generate_result> generate(backend& be, kv_cache& cache, int32_t seq,
                                 std::span<const int32_t> prompt, const generate_params& params,
                                 const token_text_fn& token_text, const text_fn& on_text);

// Length of the longest prefix of `s` that ends on a UTF-8 character boundary (an incomplete
// trailing sequence is held back; invalid bytes are let through rather than stalling forever).
size_t utf8_complete_prefix(std::string_view s);

// Streams text while holding back anything that might still turn into a stop string.
class stop_string_filter {
 public:
  explicit stop_string_filter(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds text; returns what can be emitted now. Sets `stopped` when a stop string appeared
  // (the returned text then ends just before it).
  std::string push(std::string_view text, bool& stopped);
  std::string flush();  // what is held back, when generation ends without a stop

 private:
  std::vector<std::string> stops_;
  std::string held_;
};

// What one sampled token does to a generation: the text it lets out and whether it ends it.
struct token_step {
  int32_t token = -1;
  std::string text;          // whole UTF-8 text that may be emitted now
  bool stop_token = false;   // a stop token: ends the generation, its text is never emitted
  bool stop_string = false;  // text ends just before a stop string
};

// The per-sequence side of generation: sampling with the penalty window, UTF-8 holdback and the
// stop-string filter. generate() and the serving scheduler both decode through it, so a sequence
// gives the same text alone or batched with others.
class token_stream {
 public:
  token_stream(const generate_params& params, token_text_fn token_text, std::span<const int32_t> prompt);
  token_step next(std::span<const float> logits);  // samples, then next_token
  // What the token does once picked: into the penalty window, then stop tokens, UTF-8 holdback
  // and stop strings. For a token picked elsewhere (a backend's argmax when greedy()).
  token_step next_token(int32_t token);
  bool greedy() const { return smp_.greedy(); }  // see sampler::greedy
  std::string flush();  // what is held back, when the generation ends other than by a stop string

 private:
  sampler smp_;
  stop_string_filter filter_;
  std::vector<int32_t> stop_tokens_;
  token_text_fn token_text_;
  std::string pending_;  // bytes waiting for the rest of a UTF-8 character
};

}  // namespace tandem
