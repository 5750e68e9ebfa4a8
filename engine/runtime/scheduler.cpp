// Continuous batching over the cache's sequence slots (see scheduler.h).
#include "runtime/scheduler.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>

namespace tandem {
namespace {
using clock_type = std::chrono::steady_clock;
double seconds(clock_type::time_point a, clock_type::time_point b) { return std::chrono::duration<double>(b - a).count(); }
}  // namespace

struct scheduler::request {
  uint64_t id = 0;
  session_request in;
  text_fn on_text;
  done_fn on_done;
  clock_type::time_point submitted = clock_type::now();
};

struct scheduler::slot {
  std::unique_ptr<request> req;     // null: free
  std::vector<int32_t> cached;      // the tokens the cache holds for this sequence
  uint64_t last_used = 0;
  // The running request's progress.
  size_t n_fed = 0;                 // prompt tokens in the cache
  int32_t next = -1;                // sampled token to feed next; -1 while prefilling
  int32_t n_generated = 0;
  std::optional<token_stream> out;
  generate_result res;
  clock_type::time_point started{}, first{};
  bool decoding() const { return req && next >= 0; }
};

scheduler::scheduler(backend& be, kv_cache& cache, token_text_fn token_text, scheduler_options opt)
    : be_(be), cache_(cache), token_text_(std::move(token_text)), opt_(opt), slots_(cache.config().n_seq_max) {
  opt_.chunk_tokens = std::max<uint32_t>(opt_.chunk_tokens, 1);
  counts_.slots = uint32_t(slots_.size());
  thread_ = std::thread([this] { run(); });
}

scheduler::~scheduler() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

result<uint64_t> scheduler::submit(session_request r, text_fn on_text, done_fn on_done) {
  const uint32_t n_ctx = cache_.config().n_ctx;
  if (r.prompt.empty()) return make_error("the prompt is empty");
  if (r.prompt.size() > n_ctx)
    return make_error("the prompt has ", r.prompt.size(), " tokens but the context size is ", n_ctx);
  if (r.prompt.size() > cache_.n_slots())
    return make_error("the prompt has ", r.prompt.size(), " tokens but the KV pool holds ", cache_.n_slots());
  for (int32_t t : r.prompt)
    if (t < 0 || uint32_t(t) >= be_.n_vocab()) return make_error("token id ", t, " is outside the vocabulary");
  auto q = std::make_unique<request>();
  q->in = std::move(r);
  q->on_text = std::move(on_text);
  q->on_done = std::move(on_done);
  uint64_t id;
  {
    std::lock_guard lk(mu_);
    if (stopping_) return make_error("the model is shutting down");
    id = q->id = next_id_++;
    waiting_.push_back(std::move(q));
    counts_.waiting = uint32_t(waiting_.size());
  }
  cv_.notify_all();
  return id;
}

void scheduler::cancel(uint64_t id) {
  {
    std::lock_guard lk(mu_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

result<generate_result> scheduler::generate(session_request r, const text_fn& on_text) {
  std::promise<result<generate_result>> done;
  auto fut = done.get_future();
  auto id = submit(std::move(r), on_text, [&done](result<generate_result> res) { done.set_value(std::move(res)); });
  if (!id) return id.err();
  return fut.get();
}

scheduler_counts scheduler::counts() const {
  std::lock_guard lk(mu_);
  return counts_;
}

void scheduler::run() {
  for (;;) {
    {
      std::unique_lock lk(mu_);
      const bool busy = std::any_of(slots_.begin(), slots_.end(), [](const slot& s) { return s.req != nullptr; });
      cv_.wait(lk, [&] { return stopping_ || busy || !waiting_.empty() || !cancels_.empty(); });
      if (stopping_) break;
    }
    step();
  }
  // Shutting down: nothing more runs; every request still here is told so.
  for (auto& s : slots_)
    if (s.req) finish(s, stop_reason::cancelled);
  std::deque<std::unique_ptr<request>> left;
  {
    std::lock_guard lk(mu_);
    left.swap(waiting_);
  }
  for (auto& q : left) {
    generate_result res;
    res.reason = stop_reason::cancelled;
    res.n_prompt = q->in.prompt.size();
    if (q->on_done) q->on_done(std::move(res));
  }
}

// The free slot whose cached tokens share the longest prefix with `prompt`; among equals the one
// used least recently, so a cached prefix survives as long as there is another slot to take.
size_t scheduler::choose_slot(const std::vector<int32_t>& prompt) const {
  size_t best = slots_.size(), best_len = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const slot& s = slots_[i];
    if (s.req) continue;
    size_t n = 0;
    if (opt_.prefix_reuse)
      while (n < s.cached.size() && n < prompt.size() && s.cached[n] == prompt[n]) ++n;
    if (best == slots_.size() || n > best_len || (n == best_len && s.last_used < slots_[best].last_used))
      best = i, best_len = n;
  }
  return best;
}

// Cancels first (a cancelled waiting request never takes a slot), then FIFO into free slots.
void scheduler::admit() {
  std::vector<uint64_t> cancels;
  std::vector<std::unique_ptr<request>> dropped;
  {
    std::lock_guard lk(mu_);
    cancels.swap(cancels_);
    for (uint64_t id : cancels)
      for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
        if ((*it)->id == id) {
          dropped.push_back(std::move(*it));
          waiting_.erase(it);
          break;
        }
  }
  for (auto& q : dropped) {
    generate_result res;
    res.reason = stop_reason::cancelled;
    res.n_prompt = q->in.prompt.size();
    if (q->on_done) q->on_done(std::move(res));
  }
  for (auto& s : slots_)
    if (s.req && std::find(cancels.begin(), cancels.end(), s.req->id) != cancels.end())
      finish(s, stop_reason::cancelled);
  for (;;) {
    std::unique_ptr<request> q;
    size_t i;
    {
      std::lock_guard lk(mu_);
      if (waiting_.empty()) break;
      i = choose_slot(waiting_.front()->in.prompt);
      if (i == slots_.size()) break;
      q = std::move(waiting_.front());
      waiting_.pop_front();
      counts_.waiting = uint32_t(waiting_.size());
    }
    slot& s = slots_[i];
    const auto seq = int32_t(i);
    size_t keep = 0;
    while (keep < s.cached.size() && keep < q->in.prompt.size() && s.cached[keep] == q->in.prompt[keep]) ++keep;
    keep = std::min(keep, q->in.prompt.size() - 1);  // the last prompt token is fed for its logits
    // A recurrent state only rewinds to its checkpoint; the cache says what it kept.
    keep = cache_.truncate(seq, uint32_t(keep));
    s.cached.resize(keep);
    s.n_fed = keep;
    s.next = -1;
    s.n_generated = 0;
    s.res = {};
    s.res.n_prompt = q->in.prompt.size();
    s.res.n_reused = keep;
    s.started = clock_type::now();
    s.out.emplace(q->in.params, token_text_, q->in.prompt);
    s.req = std::move(q);
    std::lock_guard lk(mu_);
    ++counts_.running;
    if (keep > 0) ++counts_.prefix_hits, counts_.reused_tokens += keep;
  }
}

void scheduler::finish(slot& s, stop_reason why) {
  auto q = std::move(s.req);
  const auto now = clock_type::now();
  if (why != stop_reason::stop_string && why != stop_reason::cancelled) {
    std::string tail = s.out->flush();
    if (!tail.empty()) {
      s.res.text += tail;
      if (q->on_text) q->on_text(tail);
    }
  }
  if (why == stop_reason::cancelled && s.n_generated == 0) {  // cancelled in prefill: keep nothing
    cache_.clear(int32_t(&s - slots_.data()));
    s.cached.clear();
  }
  s.res.reason = why;
  if (s.n_generated > 0) s.res.decode_seconds = seconds(s.first, now);
  s.out.reset();
  s.last_used = clock_;
  {
    std::lock_guard lk(mu_);
    --counts_.running;
  }
  if (q->on_done) q->on_done(std::move(s.res));
  s.res = {};
}

void scheduler::fail(slot& s, const error& e) {
  auto q = std::move(s.req);
  cache_.clear(int32_t(&s - slots_.data()));
  s.cached.clear();
  s.out.reset();
  s.last_used = clock_;
  {
    std::lock_guard lk(mu_);
    --counts_.running;
  }
  if (q->on_done) q->on_done(e);
}

// One picked token for a slot (token_stream's step already taken): the generation loop's rules,
// in generate()'s order.
void scheduler::after_token(slot& s, const token_step& st) {
  const auto now = clock_type::now();
  if (s.n_generated == 0) {
    s.first = now;
    s.res.prefill_seconds = seconds(s.started, now);
    s.res.first_token_seconds = seconds(s.req->submitted, now);
  }
  ++s.n_generated;
  s.res.tokens.push_back(st.token);
  s.next = -1;
  if (st.stop_token) return finish(s, stop_reason::stop_token);
  if (!st.text.empty()) {
    s.res.text += st.text;
    if (s.req->on_text && !s.req->on_text(st.text)) return finish(s, stop_reason::cancelled);
  }
  if (st.stop_string) return finish(s, stop_reason::stop_string);
  const int32_t max = s.req->in.params.max_tokens;
  if (max >= 0 && s.n_generated >= max) return finish(s, stop_reason::max_tokens);
  if (cache_.length(int32_t(&s - slots_.data())) >= cache_.config().n_ctx) return finish(s, stop_reason::context_limit);
  s.next = st.token;
}

// Blocks the cache must add for sequence `seq` to hold `len` tokens.
uint32_t scheduler::blocks_needed(int32_t seq, uint32_t len) const {
  const uint32_t bs = cache_.config().block_size, have = (cache_.length(seq) + bs - 1) / bs;
  const uint32_t want = (len + bs - 1) / bs;
  return want > have ? want - have : 0;
}

// Makes `n` blocks free, dropping the cached prefixes of free slots (least recently used first)
// as needed; false if even that is not enough.
bool scheduler::make_room(uint32_t n) {
  while (cache_.free_blocks() < n) {
    slot* lru = nullptr;
    for (auto& s : slots_)
      if (!s.req && !s.cached.empty() && (!lru || s.last_used < lru->last_used)) lru = &s;
    if (!lru) return false;
    cache_.clear(int32_t(lru - slots_.data()));
    lru->cached.clear();
  }
  return true;
}

// This pass's tokens: each decoding sequence's next one, then prompt pieces within the chunk.
// A sequence the KV pool has no block for stops with an error (its blocks go back to the pool);
// a prompt piece that does not fit waits while others run.
void scheduler::plan_pass(batch& b, std::vector<slot*>& rows, std::vector<std::pair<slot*, size_t>>& fed) {
  uint32_t pending = 0;  // blocks this pass takes from the pool
  auto fits = [&](size_t i, uint32_t len) {
    const uint32_t n = blocks_needed(int32_t(i), len);
    if (!make_room(pending + n)) return false;
    pending += n;
    return true;
  };
  const auto full = [&] {
    return make_error("the KV pool (", cache_.n_slots(), " tokens shared by ", slots_.size(),
                      " sequences) has no free block: the request was stopped; raise kv-tokens or lower parallel");
  };
  for (size_t i = 0; i < slots_.size(); ++i) {
    slot& s = slots_[i];
    if (!s.decoding()) continue;
    if (!fits(i, cache_.length(int32_t(i)) + 1)) {
      fail(s, full());
      continue;
    }
    b.add(s.next, int32_t(i), int32_t(cache_.length(int32_t(i))), true);
    rows.push_back(&s);
  }
  // Prompt pieces end at multiples of the chunk, so the first prefilling slot always fits and a
  // piece that does not fit waits for the next pass rather than being cut elsewhere.
  const size_t chunk = opt_.chunk_tokens;
  size_t budget = chunk;
  for (size_t i = 0; i < slots_.size() && budget > 0; ++i) {
    slot& s = slots_[i];
    if (!s.req || s.decoding()) continue;
    const auto& p = s.req->in.prompt;
    const size_t n = std::min(p.size(), (s.n_fed / chunk + 1) * chunk) - s.n_fed;
    if (n > budget) break;
    if (!fits(i, uint32_t(s.n_fed + n))) {
      if (b.size() > 0) break;  // others free blocks as they finish
      fail(s, full());          // nothing else can make room
      continue;
    }
    for (size_t j = s.n_fed; j < s.n_fed + n; ++j) b.add(p[j], int32_t(i), int32_t(j), j + 1 == p.size());
    if (s.n_fed + n == p.size()) rows.push_back(&s);
    fed.emplace_back(&s, n);
    budget -= n;
  }
}

bool scheduler::step() {
  step_record tr;
  if (trace_.on()) tr.start = clock_type::now();
  admit();
  // A sink answering false to "" (its client gone) cancels before the pass, not after it.
  for (auto& s : slots_)
    if (s.req && s.req->on_text && !s.req->on_text(std::string_view())) finish(s, stop_reason::cancelled);
  batch b;
  std::vector<slot*> rows;                    // the slot of each logits row, in batch order
  std::vector<std::pair<slot*, size_t>> fed;  // prefill tokens each slot got this pass
  plan_pass(b, rows, fed);
  if (b.size() == 0) return false;
  ++clock_;
  // Every row greedy: the backend takes each row's argmax where the logits are, and nothing
  // n_vocab wide is copied (a prefill-only pass, with no rows, goes this way too). One sampled
  // row: all rows come to the host.
  const bool argmax = std::all_of(rows.begin(), rows.end(), [](const slot* s) { return s->out->greedy(); });
  if (trace_.on()) tr.planned = clock_type::now();
  const status st = argmax ? be_.forward_argmax(b, cache_, ids_) : be_.forward(b, cache_, logits_);
  if (trace_.on()) tr.forward = clock_type::now();
  {
    std::lock_guard lk(mu_);
    ++counts_.steps;
  }
  if (!st) {  // the backend left the cache as it was: every request of this pass fails
    for (auto& s : slots_)
      if (s.req && (s.decoding() || std::any_of(fed.begin(), fed.end(), [&](auto& f) { return f.first == &s; })))
        fail(s, st.err());
    return true;
  }
  for (auto& [s, n] : fed) {
    const auto& p = s->req->in.prompt;
    s->cached.insert(s->cached.end(), p.begin() + ptrdiff_t(s->n_fed), p.begin() + ptrdiff_t(s->n_fed + n));
    s->n_fed += n;
  }
  const size_t V = be_.n_vocab();
  for (size_t r = 0; r < rows.size(); ++r) {
    slot& s = *rows[r];
    if (s.decoding()) s.cached.push_back(s.next);
    after_token(s, argmax ? s.out->next_token(ids_[r])
                          : s.out->next(std::span<const float>(logits_).subspan(r * V, V)));
  }
  if (trace_.on()) {
    tr.end = clock_type::now();
    tr.n_rows = uint32_t(rows.size());
    for (auto& [s, n] : fed) tr.n_prefill += uint32_t(n);
    tr.n_decode = uint32_t(b.size()) - tr.n_prefill;
    trace_.add(tr);
  }
  return true;
}

}  // namespace tandem
