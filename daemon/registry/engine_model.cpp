// engine_model: serves one GGUF model with the engine's backend (CPU or CUDA) and generation loop.
#include "registry/engine_model.h"

#include "log.h"

#include <atomic>
#include <algorithm>
#include <mutex>

#include "backend/backend.h"
#include "runtime/model_instance.h"
#include "chat/chat_template.h"
#include "model/model_desc.h"
#include "quant/ggml_type.h"
#include "registry/forward_watch.h"
#include "runtime/generator.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

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

// "cpu", "cuda:0", or for a layer split "cuda:0+1" (the ids of --gpus, caps left out).
std::string device_name(const engine_options& opt) {
  if (opt.gpus.empty()) return opt.gpu < 0 ? "cpu" : "cuda:" + std::to_string(opt.gpu);
  std::string ids;
  for (size_t i = 0; i < opt.gpus.size();) {
    size_t end = opt.gpus.find(',', i);
    if (end == std::string::npos) end = opt.gpus.size();
    const std::string item = opt.gpus.substr(i, end - i);
    if (!ids.empty()) ids += '+';
    ids.append(item, 0, item.find('='));
    i = end + 1;
  }
  return "cuda:" + ids;
}

class engine_model final : public served_model {
 public:
  engine_model(std::string path, const engine_options& opt, std::unique_ptr<loaded_model> model, tokenizer tok,
               chat_template tpl, std::unique_ptr<backend> be, std::unique_ptr<kv_cache> cache)
      : path_(std::move(path)), device_(device_name(opt)),
        prefill_chunk_(opt.prefill_chunk), model_(std::move(model)), tok_(std::move(tok)), tpl_(std::move(tpl)),
        be_(std::move(be)), cache_(std::move(cache)), stop_tokens_(chat_stop_tokens(tpl_, tok_)),
        watch_(std::chrono::duration<double>(opt.stall_timeout_s)) {}

  result<generation_stats> generate(const generation_input& in, const text_sink& on_text) override {
    // Weights are read from the mapped file: a file truncated under it would fault (SIGBUS).
    if (auto st = model_->file->check_unchanged(); !st) {
      mark_stale(st.message());
      return st.err();
    }
    auto prompt = encode_prompt(in);
    if (!prompt) return prompt.err();
    if (prompt->empty()) return make_error("the prompt encodes to no tokens");

    generate_params gp;
    gp.sampling.temperature = in.sampling.temperature;
    gp.sampling.top_k = static_cast<int32_t>(in.sampling.top_k);
    gp.sampling.top_p = in.sampling.top_p;
    gp.sampling.min_p = in.sampling.min_p;
    gp.sampling.repeat_penalty = in.sampling.repeat_penalty;
    gp.sampling.seed = in.sampling.seed.value_or(next_seed_++);
    gp.max_tokens = static_cast<int32_t>(in.max_tokens);
    gp.stop_tokens = stop_tokens_;
    gp.stop_strings = in.stop;
    gp.n_batch = prefill_chunk_;
    // The sink answers false once the request is cancelled or its client gone; asking it between
    // prefill passes lets a long prompt stop within one pass.
    gp.cancelled = [&on_text] { return !on_text(std::string_view()); };

    auto token_text = [this](int32_t id) { return std::string(tok_.token_bytes(id)); };
    // Replies are msgpack strings: whatever bytes the model produces, send valid UTF-8 (bytes
    // that never form a character become U+FFFD).
    stream_decoder utf8(tok_);
    std::string text;
    bool keep_going = true;
    watched_backend be(*be_, watch_);
    auto r = tandem::generate(be, *cache_, 0, *prompt, gp, token_text, [&](std::string_view t) {
      auto piece = utf8.push_bytes(t);
      text += piece;
      keep_going = on_text(piece);  // also when empty: the sink checks for cancellation
      return keep_going;
    });
    if (!r) return r.err();
    if (auto tail = utf8.finish(); !tail.empty()) {
      text += tail;
      if (keep_going) on_text(tail);
    }
    generation_stats s;
    s.finish_reason = finish_reason(r->reason);
    s.prompt_tokens = r->n_prompt;
    s.generated_tokens = r->tokens.size();
    s.prefill_seconds = r->prefill_seconds;
    s.decode_seconds = r->decode_seconds;
    s.text = std::move(text);
    return s;
  }

  result<std::vector<int32_t>> tokenize(std::string_view text, bool add_special) const override {
    encode_options o;
    o.add_bos = add_special && tok_.wants_bos();
    return tok_.encode(text, o);
  }

  result<std::string> detokenize(std::span<const int32_t> ids) const override { return tok_.decode(ids); }

  model_info info() const override {
    model_info i;
    i.path = path_;
    i.arch = model_->desc.arch ? std::string(model_->desc.arch->name) : "";
    i.backend = std::string(be_->name());
    i.device = device_;
    i.n_vocab = be_->n_vocab();
    i.n_ctx = cache_->config().n_ctx;
    i.file_bytes = model_->file->file_size();
    i.cache_bytes = cache_->bytes();
    i.state_bytes = cache_->recurrent_bytes();
    return i;
  }

  bool healthy() const override { return watch_.healthy(); }
  bool stale() const override {
    if (stale_) return true;
    if (auto st = model_->file->check_unchanged(); !st) mark_stale(st.message());
    return stale_;
  }

 private:
  result<std::vector<int32_t>> encode_prompt(const generation_input& in) const {
    if (in.prompt) {
      encode_options o;
      o.add_bos = tok_.wants_bos();
      return tok_.encode(*in.prompt, o);
    }
    std::vector<chat_message> msgs;
    msgs.reserve(in.messages.size());
    for (const auto& m : in.messages) msgs.push_back({m.role, m.content});
    auto chat = render_chat_text(tpl_, msgs);
    if (!chat) return chat.err();
    return encode_chat(tok_, *chat);  // control tokens from the template only, never from messages
  }

  std::string path_;
  std::string device_;
  mutable std::atomic<bool> stale_{false};
  void mark_stale(const std::string& why) const {
    if (!stale_.exchange(true)) log(log_level::warning, why, "; the model is unloaded once idle and reloads on its next request");
  }
  std::uint32_t prefill_chunk_;
  std::unique_ptr<loaded_model> model_;  // at a fixed address: the backend refers to its desc
  tokenizer tok_;
  chat_template tpl_;
  std::unique_ptr<backend> be_;
  std::unique_ptr<kv_cache> cache_;
  std::vector<int32_t> stop_tokens_;
  uint64_t next_seed_ = 0x7a6e64656d;  // unseeded requests still differ from one another
  forward_watch watch_;
};

uint32_t cache_tokens(const model_desc& desc, const engine_options& opt) {
  uint32_t n = opt.context;
  if (desc.hp.n_ctx_train > 0) n = std::min(n, desc.hp.n_ctx_train);
  return n;
}

}  // namespace

result<std::unique_ptr<served_model>> load_engine_model(const std::string& path, const engine_options& opt) {
  auto loaded = load_model(path);
  if (!loaded) return loaded.err();
  auto model = std::make_unique<loaded_model>(std::move(*loaded));
  auto tok = tokenizer::from_gguf(*model->file);
  if (!tok) return make_error(path, ": tokenizer: ", tok.message());
  auto tpl = chat_template_for(*tok, opt.chat_format);
  if (!tpl) return make_error(path, ": chat template: ", tpl.message());
  instance_options io;
  io.gpu = opt.gpu;
  io.gpus = opt.gpus;
  io.ratios = opt.ratios;
  io.split = opt.split;
  io.n_threads = opt.threads;
  io.cache.n_ctx = cache_tokens(model->desc, opt);  // the memory plan of a split sizes this cache
  auto be = make_backend(model->desc, io);
  if (!be) return make_error(path, ": backend: ", be.message());
  kv_cache_config kc;
  kc.n_ctx = cache_tokens(model->desc, opt);
  kc.n_seq_max = 1;
  auto cache = (*be)->make_cache(kc);
  if (!cache) return make_error(path, ": KV cache: ", cache.message());
  return std::unique_ptr<served_model>(std::make_unique<engine_model>(
      path, opt, std::move(model), std::move(*tok), std::move(*tpl), std::move(*be), std::move(*cache)));
}

engine_options engine_options::for_alias(const std::string& alias) const {
  engine_options o = *this;
  if (auto it = model_gpus.find(alias); it != model_gpus.end()) {
    o.gpus = it->second;
    auto r = model_ratios.find(alias);
    o.ratios = r != model_ratios.end() ? r->second : std::string();
  } else if (auto r = model_ratios.find(alias); r != model_ratios.end()) {
    o.ratios = r->second;
  }
  if (auto s = model_split.find(alias); s != model_split.end()) o.split = s->second;
  return o;
}

model_loader engine_loader(engine_options opt) {
  return [opt](const std::string& alias, const std::string& path) {
    return load_engine_model(path, opt.for_alias(alias));
  };
}

result<std::uint64_t> engine_model_bytes(const std::string& path, const engine_options& opt) {
  auto loaded = load_model(path);  // maps and binds: reads the header, not the weights
  if (!loaded) return loaded.err();
  const auto& hp = loaded->desc.hp;
  // As load_engine_model's cache: one sequence, f16 K and V rows per attention layer and KV head,
  // in blocks of kv_cache_config's default size; a hybrid model's recurrent state (fp32 conv and
  // S per DeltaNet layer) and its checkpoint copy.
  const kv_cache_config kc;
  const uint64_t slots = (uint64_t{cache_tokens(loaded->desc, opt)} + kc.block_size - 1) / kc.block_size *
                         kc.block_size;
  const uint64_t row = row_bytes(kc.type, hp.head_dim).value_or(uint64_t{hp.head_dim} * 4);
  const delta_net_shape dn = delta_net_of(hp);
  const uint64_t state = 2 * uint64_t{hp.n_delta_net_layers()} * (dn.conv_state_floats() + dn.ssm_state_floats()) * 4;
  return loaded->file->file_size() + 2 * uint64_t{hp.n_attention_layers()} * slots * hp.n_head_kv * row + state;
}

model_sizer engine_sizer(engine_options opt) {
  return [opt](const std::string& alias, const std::string& path) {
    return engine_model_bytes(path, opt.for_alias(alias));
  };
}

}  // namespace tandem::daemon
