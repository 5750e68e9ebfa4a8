// engine_model: serves one GGUF model with the engine's backend (CPU or CUDA) and generation loop.
#include "registry/engine_model.h"

#include "log.h"

#include <atomic>
#include <algorithm>
#include <chrono>
#include <mutex>

#include "metrics/token_gap_timer.h"
#include "quant/ggml_type.h"
#include "runtime/serving_session.h"
#include "tokenizer/stream_decoder.h"

namespace tandem::daemon {
namespace {

std::string finish_reason(stop_reason r) {
  switch (r) {
    case stop_reason::max_tokens: return "length";
    case stop_reason::stop_token:
    case stop_reason::stop_string: return "stop";
    case stop_reason::context_limit: return "context_limit";
    case stop_reason::cancelled: return "cancelled";
  }
  return "stop";
}

class engine_model final : public served_model {
 public:
  engine_model(std::string path, const engine_options& opt, std::unique_ptr<serving_session> session)
      : path_(std::move(path)), kv_type_(opt.kv_type), parallel_(std::max(1u, opt.parallel)),
        session_(std::move(session)) {}

  // Called by several worker threads at once (slots()): each waits for its own sequence while the
  // session's scheduler decodes them together.
  result<generation_stats> generate(const generation_input& in, const text_sink& on_text) override {
    const auto entered = std::chrono::steady_clock::now();
    // Weights are read from the mapped file: a file truncated under it would fault (SIGBUS).
    if (auto st = session_->file().check_unchanged(); !st) {
      mark_stale(st.message());
      return st.err();
    }
    session_request req;
    auto prompt = encode(in);
    if (!prompt) return prompt.err();
    if (prompt->empty()) return make_error("the prompt encodes to no tokens");
    req.prompt = std::move(*prompt);
    auto& gp = req.params;
    gp.sampling.temperature = in.sampling.temperature;
    gp.sampling.top_k = static_cast<int32_t>(in.sampling.top_k);
    gp.sampling.top_p = in.sampling.top_p;
    gp.sampling.min_p = in.sampling.min_p;
    gp.sampling.repeat_penalty = in.sampling.repeat_penalty;
    gp.sampling.seed = in.sampling.seed.value_or(next_seed_.fetch_add(1));
    gp.max_tokens = static_cast<int32_t>(in.max_tokens);
    gp.stop_strings = in.stop;

    // Replies are msgpack strings: whatever bytes the model produces, send valid UTF-8 (bytes
    // that never form a character become U+FFFD).
    stream_decoder utf8(session_->tok());
    std::string text;
    bool keep_going = true;
    // Per token: a clock read and the histogram's two atomic adds; per step an increment.
    metrics::token_gap_timer gaps(in.token_gaps);
    const auto submitted = std::chrono::steady_clock::now();
    // The scheduler also calls with "" once per step: the sink answers false once the request is
    // cancelled or its client gone, which frees the sequence within one step.
    auto r = session_->generate(std::move(req), [&](std::string_view t) {
      if (t.empty()) gaps.on_step();
      else gaps.on_text(std::chrono::steady_clock::now());
      auto piece = utf8.push_bytes(t);
      text += piece;
      keep_going = on_text(piece);
      return keep_going;
    });
    if (!r) return r.err();
    gaps.finish(r->tokens.size(), r->decode_seconds);
    if (auto tail = utf8.finish(); !tail.empty()) {
      text += tail;
      if (keep_going) on_text(tail);
    }
    generation_stats s;
    s.finish_reason = finish_reason(r->reason);
    s.prompt_tokens = r->n_prompt;
    s.reused_tokens = r->n_reused;
    s.generated_tokens = r->tokens.size();
    s.setup_seconds = std::chrono::duration<double>(submitted - entered).count();
    s.first_token_seconds = r->first_token_seconds;
    s.prefill_seconds = r->prefill_seconds;
    s.decode_seconds = r->decode_seconds;
    s.text = std::move(text);
    return s;
  }

  unsigned slots() const override { return parallel_; }

  sequence_counts counts() const override {
    const auto c = session_->counts();
    return {c.slots, c.running, c.waiting, c.prefix_hits, c.reused_tokens};
  }

  result<std::vector<int32_t>> tokenize(std::string_view text, bool add_special) const override {
    encode_options o;
    o.add_bos = add_special && session_->tok().wants_bos();
    return session_->tok().encode(text, o);
  }

  result<std::string> detokenize(std::span<const int32_t> ids) const override { return session_->tok().decode(ids); }

  model_info info() const override {
    model_info i;
    const auto& desc = session_->desc();
    i.path = path_;
    i.arch = desc.arch ? std::string(desc.arch->name) : "";
    i.backend = std::string(session_->backend_name());
    i.device = session_->placement();
    i.kv_type = kv_type_;
    i.n_vocab = desc.hp.n_vocab;
    i.n_ctx = session_->cache().config().n_ctx;
    i.parallel = parallel_;
    i.file_bytes = session_->file().file_size();
    i.cache_bytes = session_->cache().bytes();
    i.state_bytes = session_->cache().recurrent_bytes();
    return i;
  }

  bool healthy() const override { return session_->healthy(); }
  bool stale() const override {
    if (stale_) return true;
    if (auto st = session_->file().check_unchanged(); !st) mark_stale(st.message());
    return stale_;
  }

 private:
  result<std::vector<int32_t>> encode(const generation_input& in) const {
    if (in.prompt) return session_->encode_prompt(*in.prompt);
    std::vector<chat_message> msgs;
    msgs.reserve(in.messages.size());
    for (const auto& m : in.messages) msgs.push_back({m.role, m.content});
    return session_->encode_messages(msgs);  // control tokens from the template only, never from messages
  }

  void mark_stale(const std::string& why) const {
    if (!stale_.exchange(true)) log(log_level::warning, why, "; the model is unloaded once idle and reloads on its next request");
  }

  std::string path_;
  std::string kv_type_;
  unsigned parallel_;
  mutable std::atomic<bool> stale_{false};
  std::unique_ptr<serving_session> session_;
  std::atomic<uint64_t> next_seed_{0x7a6e64656d};  // unseeded requests still differ from one another
};

session_options session_options_of(const engine_options& opt) {
  session_options so;
  so.instance.gpu = opt.gpu;
  so.instance.gpus = opt.gpus;
  so.instance.ratios = opt.ratios;
  so.instance.split = opt.split;
  so.instance.n_threads = opt.threads;
  so.instance.cache.n_ctx = opt.context;
  so.parallel = std::max(1u, opt.parallel);
  so.kv_tokens = opt.kv_tokens;
  // daemon_config checked the name; an unknown one would keep the default.
  if (auto t = type_from_name(opt.kv_type)) so.instance.cache.type = *t;
  so.schedule.chunk_tokens = opt.prefill_chunk;
  so.chat_format = opt.chat_format;
  so.stall_timeout_s = opt.stall_timeout_s;
  return so;
}

}  // namespace

result<std::unique_ptr<served_model>> load_engine_model(const std::string& path, const engine_options& opt,
                                                        load_progress* progress) {
  auto so = session_options_of(opt);
  so.instance.progress = progress;
  auto session = serving_session::open(path, so);
  if (!session) return session.err();
  if (const auto& note = (*session)->placement_note(); !note.empty()) log(log_level::warning, path, ": ", note);
  return std::unique_ptr<served_model>(std::make_unique<engine_model>(path, opt, std::move(*session)));
}

engine_options engine_options::with(const proto::model_settings& s) const {
  engine_options o = *this;
  if (s.gpus) {
    o.gpus = *s.gpus;
    o.ratios.clear();
  }
  if (s.ratios) o.ratios = *s.ratios;
  if (s.split) o.split = *s.split;
  if (s.context) o.context = *s.context;
  if (s.kv_type) o.kv_type = *s.kv_type;
  if (s.parallel) o.parallel = *s.parallel;
  return o;
}

model_loader engine_loader(engine_options opt) {
  return [opt](const std::string&, const std::string& path, const proto::model_settings& s, load_progress* progress) {
    return load_engine_model(path, opt.with(s), progress);
  };
}

result<std::uint64_t> engine_model_bytes(const std::string& path, const engine_options& opt) {
  return serving_session::footprint(path, session_options_of(opt));
}

model_sizer engine_sizer(engine_options opt) {
  return [opt](const std::string&, const std::string& path, const proto::model_settings& s) {
    return engine_model_bytes(path, opt.with(s));
  };
}

}  // namespace tandem::daemon
