// The serving scheduler: continuous batching over a model's sequence slots. Every step is one
// forward pass over all running sequences — a decode token for each sequence past its prompt plus
// at most one chunk's worth of prompt tokens of those still being read — so a long prompt delays
// the others' next token by at most one chunk. A prompt is cut at the same positions (multiples
// of the chunk) whatever shares its passes, so its numbers do not depend on the company it keeps. Requests beyond the slots wait in FIFO
// order; a finished sequence's KV stays in its slot, and a later prompt sharing its prefix starts
// there (prefix reuse). A pass whose logits rows are all greedy takes the backend's argmax of
// each (nothing n_vocab wide leaves the device); one sampled row makes it copy them all.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"
#include "runtime/generator.h"
#include "runtime/step_trace.h"

namespace tandem {

// Prompt tokens in one forward pass by default. Larger passes carry several waiting prompts at once
// and pay the prefill path's per-pass costs (each projection's weights dequantized for the GEMM)
// once for them: 64 clients on an 8B model get 15.1x one client's throughput at 2048, 14.4x at 512
// (docs/PERFORMANCE.md); the price is a longer stall of the others' next token while it runs.
inline constexpr uint32_t k_default_chunk_tokens = 2048;

struct scheduler_options {
  // Prompt tokens in one forward pass, besides one decode token per running sequence.
  uint32_t chunk_tokens = k_default_chunk_tokens;
  bool prefix_reuse = true;  // start a prompt from a free slot's cached prefix
};

struct session_request {
  std::vector<int32_t> prompt;
  // Sampling, max_tokens, stop tokens and strings; n_batch and cancelled are not used (the
  // step budget and cancel()/on_text decide).
  generate_params params;
};

// Called on the scheduler's thread: text as it becomes whole (also "" once per step, so a sink
// can answer false to cancel), then once the final result or the error.
using done_fn = std::function<void(result<generate_result>)>;

// What the scheduler is doing, for status replies.
struct scheduler_counts {
  uint32_t slots = 0;
  uint32_t running = 0;  // requests holding a slot (prefilling or decoding)
  uint32_t waiting = 0;  // submitted, not yet in a slot
  uint64_t steps = 0;    // forward passes run
  uint64_t prefix_hits = 0;     // requests that started from a cached prefix
  uint64_t reused_tokens = 0;   // prompt tokens those requests did not prefill
};

class scheduler {
 public:
  // `be` and `cache` outlive the scheduler; the cache's n_seq_max is the number of slots.
  scheduler(backend& be, kv_cache& cache, token_text_fn token_text, scheduler_options opt = {});
  ~scheduler();  // requests still running or waiting end with stop_reason::cancelled
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  // Thread safe; never blocks on a forward pass. A prompt that is empty or longer than the
  // context is refused here (nothing is called back).
  result<uint64_t> submit(session_request r, text_fn on_text, done_fn on_done);
  // Thread safe: the request ends (stop_reason::cancelled) within one step, its slot freed.
  void cancel(uint64_t id);
  // submit, then wait for the result: for callers that keep one thread per request.
  result<generate_result> generate(session_request r, const text_fn& on_text);

  scheduler_counts counts() const;

 private:
  struct request;
  struct slot;
  void run();
  bool step();  // false: nothing to do
  void plan_pass(batch& b, std::vector<slot*>& rows, std::vector<std::pair<slot*, size_t>>& fed);
  uint32_t blocks_needed(int32_t seq, uint32_t len) const;
  bool make_room(uint32_t n);
  void admit();
  void finish(slot& s, stop_reason why);
  void fail(slot& s, const error& e);
  void after_token(slot& s, const token_step& st);
  size_t choose_slot(const std::vector<int32_t>& prompt) const;

  backend& be_;
  kv_cache& cache_;
  token_text_fn token_text_;
  scheduler_options opt_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<request>> waiting_;
  std::vector<uint64_t> cancels_;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  scheduler_counts counts_;

  // Scheduler thread only.
  std::vector<slot> slots_;
  std::vector<float> logits_;  // a pass's rows when one of them is sampled
  std::vector<int32_t> ids_;   // the backend's argmax of each row when all are greedy
  uint64_t clock_ = 0;  // steps, for least-recently-used slot choice
  step_trace trace_;    // TANDEM_SCHEDULER_TRACE: a line per pass
  std::thread thread_;
};

}  // namespace tandem
