// A serving session: one model opened for serving (file, tokenizer, chat template, backend and a
// KV pool of `parallel` sequences) with the scheduler that batches its requests. The one way a
// model is opened to serve; tandemd's workers and tools talk to this, not to the backend.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "core/result.h"
#include "runtime/forward_watch.h"
#include "runtime/model_instance.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

struct session_options {
  // Device, threads and the cache: cache.n_ctx is per sequence (0, or more than the model was
  // trained for: the model's training context), cache.type the KV type. n_seq_max is `parallel`.
  instance_options instance;
  uint32_t parallel = 1;  // sequences decoded together
  // Token slots of the KV pool the sequences share; 0: parallel × the context, so that every
  // sequence can always reach its context. Smaller pools bet that most requests are short: a
  // sequence that finds no free block then ends with an error (never touching another's KV).
  uint64_t kv_tokens = 0;
  scheduler_options schedule;
  std::string chat_format;       // empty: from the model's template
  double stall_timeout_s = 300;  // a forward pass longer than this makes the session unhealthy; 0: never
};

class serving_session {
 public:
  // Errors name the step that failed (file, tokenizer, chat template, backend, KV cache).
  static result<std::unique_ptr<serving_session>> open(const std::string& path, session_options opt);
  // What open would hold, from the GGUF header and the memory plan, without loading: the file
  // (mapped or uploaded weights) plus the KV pool and recurrent state for these options.
  static result<uint64_t> footprint(const std::string& path, const session_options& opt);

  ~serving_session();

  // A raw prompt (BOS where the model wants one) or a chat rendered by the model's template
  // (control tokens come from the template only, never from message text).
  result<std::vector<int32_t>> encode_prompt(std::string_view text) const;
  result<std::vector<int32_t>> encode_messages(std::span<const chat_message> messages) const;

  // The scheduler's submit/generate with the template's stop tokens added to the request's.
  result<uint64_t> submit(session_request r, text_fn on_text, done_fn on_done);
  result<generate_result> generate(session_request r, const text_fn& on_text);
  void cancel(uint64_t id) { sched_->cancel(id); }
  scheduler_counts counts() const { return sched_->counts(); }
  // False while a forward pass has run longer than the stall timeout (a wedged GPU).
  bool healthy() const { return watch_.healthy(); }

  const tokenizer& tok() const { return tok_; }
  const model_desc& desc() const { return inst_->desc(); }
  const gguf_file& file() const { return inst_->file(); }
  std::string_view backend_name() const { return inst_->be().name(); }
  const std::string& placement() const { return inst_->placement(); }            // "cpu", "cuda:1", "cuda:0+1"
  const std::string& placement_note() const { return inst_->placement_note(); }  // why not as asked; or empty
  const kv_cache& cache() const { return inst_->cache(); }

 private:
  serving_session(std::unique_ptr<model_instance> inst, tokenizer tok, chat_template tpl, const session_options& opt);
  void add_stops(session_request& r) const;

  std::unique_ptr<model_instance> inst_;
  tokenizer tok_;
  chat_template tpl_;
  std::vector<int32_t> stop_tokens_;
  forward_watch watch_;
  watched_backend watched_;
  std::unique_ptr<scheduler> sched_;  // last: its thread stops before the rest goes
};

}  // namespace tandem
