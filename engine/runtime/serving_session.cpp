// Opening a model to serve, and the request path through its scheduler (see serving_session.h).
#include "runtime/serving_session.h"

#include <algorithm>
#include <cstdint>

#include "plan/memory_plan.h"

namespace tandem {
namespace {

// The per-sequence context the session's cache gets: asked for, capped at the training context.
uint32_t session_ctx(const model_desc& desc, uint32_t asked) {
  const uint32_t train = desc.hp.n_ctx_train;
  if (asked == 0) return train;
  return train > 0 ? std::min(asked, train) : asked;
}

// The pool's blocks for a token budget (0: the cache's default, every sequence at full context).
uint32_t pool_blocks(const session_options& opt) {
  const uint64_t bs = std::max<uint32_t>(1, opt.instance.cache.block_size);
  return uint32_t(std::min<uint64_t>((opt.kv_tokens + bs - 1) / bs, UINT32_MAX));
}

}  // namespace

serving_session::serving_session(std::unique_ptr<model_instance> inst, tokenizer tok, chat_template tpl,
                                 const session_options& opt)
    : inst_(std::move(inst)), tok_(std::move(tok)), tpl_(std::move(tpl)), stop_tokens_(chat_stop_tokens(tpl_, tok_)),
      watch_(std::chrono::duration<double>(opt.stall_timeout_s)), watched_(inst_->be(), watch_) {
  sched_ = std::make_unique<scheduler>(
      watched_, inst_->cache(), [this](int32_t id) { return std::string(tok_.token_bytes(id)); }, opt.schedule);
}

serving_session::~serving_session() { sched_.reset(); }

result<std::unique_ptr<serving_session>> serving_session::open(const std::string& path, session_options opt) {
  opt.instance.cache.n_seq_max = std::max<uint32_t>(1, opt.parallel);
  opt.instance.cache.n_blocks = pool_blocks(opt);
  opt.instance.ctx_within_training = true;
  // A pass carries a prompt chunk beside one decode token per sequence.
  opt.instance.n_batch = opt.schedule.chunk_tokens + opt.instance.cache.n_seq_max;
  auto inst = model_instance::open(path, opt.instance);
  if (!inst) return make_error(path, ": ", inst.message());
  auto tok = tokenizer::from_gguf((*inst)->file());
  if (!tok) return make_error(path, ": tokenizer: ", tok.message());
  auto tpl = chat_template_for(*tok, opt.chat_format);
  if (!tpl) return make_error(path, ": chat template: ", tpl.message());
  return std::unique_ptr<serving_session>(
      new serving_session(std::move(*inst), std::move(*tok), std::move(*tpl), opt));
}

result<uint64_t> serving_session::footprint(const std::string& path, const session_options& opt) {
  auto loaded = load_model(path);  // maps and binds: reads the header, not the weights
  if (!loaded) return loaded.err();
  // One device big enough for anything, allocations counted exactly: of its usage only the cache
  // and the recurrent state depend on the options; the weights are the file's bytes.
  plan_options po;
  device_spec dev;
  dev.name = "footprint";
  dev.total_bytes = dev.free_bytes = uint64_t{1} << 62;
  po.devices = {dev};
  po.n_ctx = session_ctx(loaded->desc, opt.instance.cache.n_ctx);
  po.n_seqs = std::max<uint32_t>(1, opt.parallel);
  po.n_kv_tokens = uint64_t{pool_blocks(opt)} * opt.instance.cache.block_size;
  po.block_size = opt.instance.cache.block_size;
  po.kv_type = opt.instance.cache.type;
  po.rt.alloc_granularity = 1;
  po.margin_bytes = 0;
  auto plan = make_memory_plan(loaded->desc, po);
  if (!plan) return plan.err();
  const device_usage& u = plan->usage.at(0);
  return loaded->file->file_size() + u.kv_cache + u.state;
}

result<std::vector<int32_t>> serving_session::encode_prompt(std::string_view text) const {
  encode_options o;
  o.add_bos = tok_.wants_bos();
  return tok_.encode(text, o);
}

result<std::vector<int32_t>> serving_session::encode_messages(std::span<const chat_message> messages) const {
  auto chat = render_chat_text(tpl_, messages);
  if (!chat) return chat.err();
  return encode_chat(tok_, *chat);
}

void serving_session::add_stops(session_request& r) const {
  auto& st = r.params.stop_tokens;
  for (int32_t t : stop_tokens_)
    if (std::find(st.begin(), st.end(), t) == st.end()) st.push_back(t);
}

result<uint64_t> serving_session::submit(session_request r, text_fn on_text, done_fn on_done) {
  add_stops(r);
  return sched_->submit(std::move(r), std::move(on_text), std::move(on_done));
}

result<generate_result> serving_session::generate(session_request r, const text_fn& on_text) {
  add_stops(r);
  return sched_->generate(std::move(r), on_text);
}

}  // namespace tandem
