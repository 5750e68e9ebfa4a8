// model_registry: alias bookkeeping, hot swap and idle unload.
#include "registry/model_registry.h"

#include <utility>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tandem::daemon {

using proto::error_code;
using proto::wire_error;

nlohmann::json load_json(const load_record& r) {
  return {{"bytes", r.bytes}, {"seconds", r.seconds}, {"bytes_per_second", r.bytes_per_second()}};
}

model_registry::model_registry(model_loader loader, registry_options opt, admin_executor admin)
    : loader_(std::move(loader)), opt_(opt), admin_(std::move(admin)) {}

model_registry::~model_registry() {
  close_all();
  join_all();
}

model_registry::state model_registry::state_of(const entry& e) {
  if (e.current) return state::resident;
  return e.admin_busy ? state::loading : state::unloaded;
}

std::string model_registry::resolve(const std::string& alias) const { return alias.empty() ? default_ : alias; }

std::string model_registry::default_alias() const {
  std::lock_guard lk(mu_);
  return default_;
}

std::size_t model_registry::size() const {
  std::lock_guard lk(mu_);
  return entries_.size();
}

void model_registry::fail_all(std::deque<model_job>& jobs, const wire_error& e) {
  for (auto& j : jobs)
    if (j.fail) j.fail(e);
  jobs.clear();
}

void model_registry::set_tables(std::map<std::string, proto::model_settings> tables) {
  std::lock_guard lk(mu_);
  opt_.tables = std::move(tables);
}

proto::model_settings model_registry::settings_for(const std::string& alias,
                                                   const proto::model_settings& request) const {
  std::lock_guard lk(mu_);
  auto it = opt_.tables.find(alias);
  return it == opt_.tables.end() ? request : it->second.overridden_by(request);
}

model_registry::admin_error model_registry::load(const std::string& alias, const std::string& path,
                                                 const proto::model_settings& request, model_info& out) {
  const auto settings = settings_for(alias, request);
  {
    std::lock_guard lk(mu_);
    if (closed_) return wire_error{error_code::shutting_down, "tandemd is shutting down"};
    auto it = entries_.find(alias);
    if (it != entries_.end() && state_of(it->second) != state::unloaded)
      return wire_error{error_code::exists, "model '" + alias + "' is already loaded; use swap to replace it"};
    auto& e = entries_[alias];
    e.path = path;
    e.settings = settings;
    e.keep_alive_s = settings.keep_alive_s.value_or(opt_.keep_alive_s);
    e.admin_busy = true;
    if (default_.empty()) default_ = alias;
  }
  return finish_load(alias, load_fitting(alias, "load", path, settings), &out);
}

model_registry::admin_error model_registry::swap(const std::string& alias, const std::string& path,
                                                 const proto::model_settings& request, model_info& out) {
  const auto settings = settings_for(alias, request);
  {
    std::lock_guard lk(mu_);
    if (closed_) return wire_error{error_code::shutting_down, "tandemd is shutting down"};
    auto it = entries_.find(alias);
    if (it == entries_.end()) return wire_error{error_code::not_found, "no model named '" + alias + "'"};
    if (it->second.admin_busy)
      return wire_error{error_code::busy, "a load or swap of '" + alias + "' is already in progress"};
    it->second.admin_busy = true;
  }
  // Only swaps that began are reported: an alias that does not exist makes no metrics series.
  const auto began = std::chrono::steady_clock::now();
  auto err = swap_admitted(alias, path, settings, out);
  if (opt_.on_swap)
    opt_.on_swap(alias, err ? proto::to_string(err->code) : std::string_view("ok"),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  return err;
}

model_registry::admin_error model_registry::swap_admitted(const std::string& alias, const std::string& path,
                                                          const proto::model_settings& settings, model_info& out) {
  if (opt_.memory_budget > 0) {
    auto need = opt_.sizer ? opt_.sizer(alias, path, settings) : result<std::uint64_t>(std::uint64_t{0});
    if (!need) return finish_load(alias, need.err(), &out);
    std::vector<std::shared_ptr<model_worker>> victims;
    std::optional<std::string> refused;
    bool beside = false;
    {
      std::lock_guard lk(mu_);
      auto& e = entries_.at(alias);  // admin_busy keeps it from being erased
      const std::uint64_t old_bytes = e.current ? e.current->bytes() : 0;
      beside = used_locked() + *need <= opt_.memory_budget;
      if (beside) e.reserved = *need;
      else refused = make_room(alias, *need, old_bytes, victims);
    }
    if (refused) return finish_load(alias, make_error("swap to ", path, ": ", *refused), &out);
    if (!beside) return swap_drain_first(alias, path, settings, *need, std::move(victims), out);
  }
  // The old model keeps serving while the new one loads beside it.
  auto loaded = open_model(alias, "swap", path, settings);
  if (loaded) adopt_swapped(alias, path, settings);
  return finish_load(alias, std::move(loaded), &out);
}

result<std::unique_ptr<served_model>> model_registry::open_model(const std::string& alias, const std::string& op,
                                                                 const std::string& path,
                                                                 const proto::model_settings& settings) {
  // Held here as well as by the entry: the loader's threads may report until it returns, even if
  // the entry's record were replaced meanwhile.
  auto progress = std::make_shared<load_progress>();
  {
    std::lock_guard lk(mu_);
    if (auto it = entries_.find(alias); it != entries_.end())
      it->second.opening = open_in_progress{op, path, progress, model_worker::clock::now(), std::nullopt};
  }
  auto m = loader_(alias, path, settings, progress.get());
  {
    std::lock_guard lk(mu_);
    if (auto it = entries_.find(alias); it != entries_.end() && it->second.opening &&
                                        it->second.opening->progress == progress)
      it->second.opening->ended = model_worker::clock::now();
  }
  return m;
}

model_registry::admin_error model_registry::finish_load(const std::string& alias,
                                                        result<std::unique_ptr<served_model>> m,
                                                        model_info* out) {
  std::shared_ptr<model_worker> inst;
  if (m) inst = std::make_shared<model_worker>(std::move(*m), opt_.max_queue);
  std::deque<model_job> to_fail;
  admin_error err;
  {
    std::lock_guard lk(mu_);
    auto it = entries_.find(alias);
    // The open is over either way: its figures go with the model it made, or nowhere.
    std::optional<open_in_progress> opened;
    if (it != entries_.end()) opened = std::exchange(it->second.opening, std::nullopt);
    if (inst && opened) {
      const auto end = opened->ended.value_or(model_worker::clock::now());
      inst->set_load({opened->progress->done_bytes.load(std::memory_order_relaxed),
                      std::chrono::duration<double>(end - opened->started).count()});
    }
    if (it == entries_.end() || closed_) {  // unloaded or shut down while loading
      err = wire_error{closed_ ? error_code::shutting_down : error_code::not_found,
                       "model '" + alias + "' went away while loading"};
      if (inst) inst->close();
    } else if (!inst) {
      auto& e = it->second;
      e.admin_busy = false;
      e.reserved = 0;
      err = wire_error{error_code::load_failed, m.message()};
      if (!e.current) {
        to_fail.swap(e.parked);
        if (e.loaded_at == model_worker::clock::time_point{}) {  // never served: forget it
          entries_.erase(it);
          if (default_ == alias) default_ = entries_.empty() ? "" : entries_.begin()->first;
        }
      }
    } else {
      auto& e = it->second;
      e.admin_busy = false;
      e.reserved = 0;
      auto old = std::move(e.current);
      e.current = inst;
      e.loaded_at = model_worker::clock::now();
      if (old) {
        // Atomic repoint: from here on, new submissions see the new model. Jobs that had not
        // started move with the alias; the running one finishes on the old model.
        inst->adopt(old->close_and_take_queued());
        retired_.push_back(std::move(old));
        ++e.swaps;
      }
      inst->adopt(std::move(e.parked));
      e.parked.clear();
      if (out) *out = inst->info();
    }
  }
  fail_all(to_fail, err ? *err : wire_error{error_code::load_failed, "load failed"});
  if (err && inst) inst->join();
  return err;
}

model_registry::admin_error model_registry::unload(const std::string& alias) {
  std::deque<model_job> parked;
  {
    std::lock_guard lk(mu_);
    auto it = entries_.find(alias);
    if (it == entries_.end()) return wire_error{error_code::not_found, "no model named '" + alias + "'"};
    if (it->second.admin_busy)
      return wire_error{error_code::busy, "a load or swap of '" + alias + "' is in progress"};
    if (auto& cur = it->second.current) {
      cur->close();  // accepted jobs still run; sweep() joins it once drained
      retired_.push_back(std::move(cur));
    }
    parked.swap(it->second.parked);
    entries_.erase(it);
    if (default_ == alias) default_ = entries_.empty() ? "" : entries_.begin()->first;
  }
  fail_all(parked, {error_code::not_found, "model '" + alias + "' was unloaded"});
  return std::nullopt;
}

std::optional<wire_error> model_registry::submit(const std::string& alias_in, model_job job) {
  std::lock_guard lk(mu_);
  if (closed_) return wire_error{error_code::shutting_down, "tandemd is shutting down"};
  const auto alias = resolve(alias_in);
  if (alias.empty()) return wire_error{error_code::not_found, "no model is loaded"};
  auto it = entries_.find(alias);
  if (it == entries_.end()) return wire_error{error_code::not_found, "no model named '" + alias + "'"};
  auto& e = it->second;
  if (!e.current) {
    // Loading (first load, or a reload after idle unload): park, bounded like a queue.
    if (e.parked.size() >= opt_.max_queue)
      return wire_error{error_code::busy, "model '" + alias + "' is loading and its queue is full"};
    e.parked.push_back(std::move(job));
    if (!e.admin_busy) start_reload(alias, e);
    return std::nullopt;
  }
  switch (e.current->push(std::move(job))) {
    case model_worker::push_result::ok: return std::nullopt;
    case model_worker::push_result::full:
      return wire_error{error_code::busy, "model '" + alias + "' has " + std::to_string(opt_.max_queue) +
                                              " requests waiting; try again later"};
    case model_worker::push_result::closed: break;
  }
  return wire_error{error_code::internal, "model '" + alias + "' refused the request"};
}

void model_registry::start_reload(const std::string& alias, entry& e) {
  e.admin_busy = true;
  admin_([this, alias, path = e.path, settings = e.settings] {
    (void)finish_load(alias, load_fitting(alias, "reload", path, settings), nullptr);
  });
}

void model_registry::adopt_swapped(const std::string& alias, const std::string& path,
                                   const proto::model_settings& settings) {
  std::lock_guard lk(mu_);
  auto it = entries_.find(alias);
  if (it == entries_.end()) return;
  it->second.path = path;
  it->second.settings = settings;
  it->second.keep_alive_s = settings.keep_alive_s.value_or(opt_.keep_alive_s);  // as a load: nothing carried over
}

result<std::shared_ptr<model_worker>> model_registry::resident(const std::string& alias_in) const {
  std::lock_guard lk(mu_);
  const auto alias = resolve(alias_in);
  auto it = entries_.find(alias);
  if (alias.empty() || it == entries_.end()) return make_error("no model named '", alias, "'");
  if (it->second.current) return it->second.current;
  if (it->second.draining) return it->second.draining;  // tokenizing needs no queue slot
  return make_error("model '", alias, "' is not loaded right now");
}

void model_registry::sweep(model_worker::clock::time_point now) {
  {
    std::lock_guard lk(mu_);
    for (auto& [alias, e] : entries_) {
      if (e.current && !e.admin_busy && e.current->idle() && e.current->model().stale()) {
        e.current->close();
        retired_.push_back(std::move(e.current));
        continue;
      }
      if (!e.current || e.admin_busy || e.keep_alive_s <= 0) continue;
      const auto keep = std::chrono::duration_cast<model_worker::clock::duration>(
          std::chrono::duration<double>(e.keep_alive_s));
      if (!e.current->idle_for(keep, now)) continue;
      e.current->close();
      retired_.push_back(std::move(e.current));  // the entry stays: a request reloads it
    }
  }
  reap_retired();
}

namespace {

// Hands the allocator's free memory back to the system after an instance is gone: a swapped-out
// model's buffers below the allocator's mapping threshold stay in its arenas otherwise, and a
// daemon that swaps for weeks would hold its high-water mark for good.
void return_free_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace

void model_registry::reap_retired() {
  std::vector<std::shared_ptr<model_worker>> done;
  {
    std::lock_guard lk(mu_);
    for (auto it = retired_.begin(); it != retired_.end();) {
      if ((*it)->idle()) {
        done.push_back(std::move(*it));
        it = retired_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (done.empty()) return;
  for (auto& d : done) d->join();  // closed and empty: the worker is exiting
  done.clear();  // the last references: the instances' memory is freed here
  return_free_heap();
}

void model_registry::close_all() {
  std::deque<model_job> parked;
  {
    std::lock_guard lk(mu_);
    closed_ = true;
    for (auto& [alias, e] : entries_) {
      for (auto& j : e.parked) parked.push_back(std::move(j));
      e.parked.clear();
      if (e.current) {
        e.current->close();
        retired_.push_back(std::move(e.current));
      }
    }
  }
  fail_all(parked, {error_code::shutting_down, "tandemd is shutting down"});
}

bool model_registry::drained() const {
  std::lock_guard lk(mu_);
  for (const auto& r : retired_)
    if (r->queued() > 0 || r->running()) return false;
  for (const auto& [alias, e] : entries_) {
    if (e.current && !e.current->idle()) return false;
    if (e.draining && !e.draining->idle()) return false;
  }
  return true;
}

void model_registry::join_all() {
  std::vector<std::shared_ptr<model_worker>> all;
  {
    std::lock_guard lk(mu_);
    all.swap(retired_);
  }
  for (auto& r : all) r->join();
}

bool model_registry::healthy() const {
  std::lock_guard lk(mu_);
  // A retired or draining instance may still be running a request: a wedged one counts too.
  for (const auto& [alias, e] : entries_) {
    if (e.current && !e.current->model().healthy()) return false;
    if (e.draining && !e.draining->model().healthy()) return false;
  }
  for (const auto& r : retired_)
    if (!r->model().healthy()) return false;
  return true;
}

nlohmann::json model_registry::describe() const {
  std::lock_guard lk(mu_);
  auto list = nlohmann::json::array();
  for (const auto& [alias, e] : entries_) {
    nlohmann::json m = {{"name", alias}, {"path", e.path}, {"default", alias == default_},
                        {"keep_alive", e.keep_alive_s}, {"swaps", e.swaps}};
    switch (state_of(e)) {
      case state::loading: m["state"] = "loading"; break;
      case state::resident: m["state"] = "resident"; break;
      case state::unloaded: m["state"] = "unloaded"; break;
    }
    m["queued"] = e.parked.size() + (e.current ? e.current->queued() : 0);
    m["running"] = (e.current && e.current->running()) || (e.draining && e.draining->running());
    if (e.draining) m["state"] = "swapping";
    if (e.current) {
      const auto& i = e.current->info();
      m["device"] = i.device;
      m["bytes"] = e.current->bytes();
      // How long since its last request, which decides the eviction order; 0 while serving.
      m["idle_seconds"] = e.current->idle() ? std::chrono::duration<double>(model_worker::clock::now() -
                                                                              e.current->last_used()).count()
                                            : 0.0;
      m["arch"] = i.arch;
      m["backend"] = i.backend;
      m["n_vocab"] = i.n_vocab;
      m["n_ctx"] = i.n_ctx;
      m["kv_type"] = i.kv_type;
      m["file_bytes"] = i.file_bytes;
      m["cache_bytes"] = i.cache_bytes;
      m["state_bytes"] = i.state_bytes;
      m["completed"] = e.current->completed();
      // The engine's view: sequences in slots, requests it holds for a slot, prefix reuse.
      const auto c = e.current->model().counts();
      m["parallel"] = c.slots;
      m["sequences"] = {{"running", c.running}, {"waiting", c.waiting}};
      m["prefix_hits"] = c.prefix_hits;
      m["reused_tokens"] = c.reused_tokens;
      if (i.load) m["load"] = load_json(*i.load);
    }
    list.push_back(std::move(m));
  }
  return list;
}

nlohmann::json model_registry::describe_loads() const {
  std::lock_guard lk(mu_);
  const auto now = model_worker::clock::now();
  auto list = nlohmann::json::array();
  for (const auto& [alias, e] : entries_) {
    if (!e.opening) continue;
    const auto& o = *e.opening;
    // done before total: the engine only adds after it has set the total.
    const std::uint64_t done = o.progress->done_bytes.load(std::memory_order_relaxed);
    const std::uint64_t total = o.progress->total_bytes.load(std::memory_order_relaxed);
    const double secs = std::chrono::duration<double>(o.ended.value_or(now) - o.started).count();
    list.push_back({{"name", alias}, {"op", o.op}, {"path", o.path}, {"done_bytes", done}, {"total_bytes", total},
                    {"seconds", secs}, {"bytes_per_second", secs > 0 ? static_cast<double>(done) / secs : 0.0}});
  }
  return list;
}

}  // namespace tandem::daemon
