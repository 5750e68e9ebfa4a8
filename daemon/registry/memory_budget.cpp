// model_registry's memory budget: admission of loads, LRU eviction of idle models and the
// drain-first swap used when the old and the new model do not fit side by side.
#include <algorithm>
#include <cstdio>

#include "registry/model_registry.h"

namespace tandem::daemon {

using proto::error_code;
using proto::wire_error;

namespace {

std::string human(std::uint64_t b) {
  static const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (b < 1024) return std::to_string(b) + " B";
  double v = static_cast<double>(b);
  int u = -1;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace

std::uint64_t model_registry::used_locked() const {
  std::uint64_t used = evicting_;
  for (const auto& [alias, e] : entries_) {
    used += e.reserved;
    if (e.current) used += e.current->bytes();
    if (e.draining) used += e.draining->bytes();
  }
  for (const auto& r : retired_) used += r->bytes();
  return used;
}

std::uint64_t model_registry::used_bytes() const {
  std::lock_guard lk(mu_);
  return used_locked();
}

std::optional<std::string> model_registry::make_room(const std::string& alias, std::uint64_t need,
                                                     std::uint64_t freed,
                                                     std::vector<std::shared_ptr<model_worker>>& victims) {
  const std::uint64_t budget = opt_.memory_budget;
  const std::uint64_t used = used_locked() - std::min(freed, used_locked());
  if (budget == 0 || used + need <= budget) return std::nullopt;
  // Candidates: other aliases' models that run nothing and wait for nothing, oldest use first.
  std::vector<std::pair<model_worker::clock::time_point, std::string>> idle;
  std::string pinned;  // the models that must stay, for the error message
  for (const auto& [name, e] : entries_) {
    if (name == alias || !e.current) continue;
    if (!e.admin_busy && e.current->idle()) idle.emplace_back(e.current->last_used(), name);
    else pinned += (pinned.empty() ? "" : ", ") + name + " " + human(e.current->bytes());
  }
  std::sort(idle.begin(), idle.end());
  std::uint64_t evictable = 0;
  std::size_t n = 0;
  while (n < idle.size() && used - evictable + need > budget) evictable += entries_.at(idle[n++].second).current->bytes();
  if (used - evictable + need > budget) {
    // A swap frees the model it replaces: say so, or "0 B are in use" reads as wrong.
    std::string msg = "'" + alias + "' needs " + human(need) + " but memory-budget is " + human(budget) + " and " +
                      human(used) + " are in use" +
                      (freed > 0 ? " besides the " + human(freed) + " of the model it replaces" : "");
    if (!idle.empty()) msg += " (" + human(evictable) + " of it by idle models that could be evicted)";
    if (!pinned.empty()) msg += "; serving or loading: " + pinned;
    return msg + "; unload a model or raise memory-budget";
  }
  for (std::size_t i = 0; i < n; ++i) {
    auto& e = entries_.at(idle[i].second);
    evicting_ += e.current->bytes();
    // The entry stays (state "unloaded"): a request for it loads it again.
    victims.push_back(std::move(e.current));
  }
  return std::nullopt;
}

void model_registry::release(std::vector<std::shared_ptr<model_worker>>& victims) {
  for (auto& v : victims) {
    v->close();
    v->join();  // idle: returns at once
    const auto b = v->bytes();
    v.reset();  // frees weights and cache (a tokenize on the aux pool may hold it a moment longer)
    std::lock_guard lk(mu_);
    evicting_ -= std::min(evicting_, b);
  }
  victims.clear();
}

std::optional<std::string> model_registry::admit(const std::string& alias, const std::string& path,
                                                 const proto::model_settings& settings) {
  if (opt_.memory_budget == 0) return std::nullopt;
  reap_retired();  // drained leftovers of earlier swaps should not cost an eviction
  auto need = opt_.sizer ? opt_.sizer(alias, path, settings) : result<std::uint64_t>(std::uint64_t{0});
  if (!need) return need.message();
  std::vector<std::shared_ptr<model_worker>> victims;
  {
    std::lock_guard lk(mu_);
    auto it = entries_.find(alias);
    if (it == entries_.end()) return "model '" + alias + "' went away while loading";
    if (auto refused = make_room(alias, *need, 0, victims)) return refused;
    it->second.reserved = *need;
  }
  release(victims);
  return std::nullopt;
}

result<std::unique_ptr<served_model>> model_registry::load_fitting(const std::string& alias, const std::string& op,
                                                                   const std::string& path,
                                                                   const proto::model_settings& settings) {
  if (auto refused = admit(alias, path, settings)) return make_error(*refused);
  return open_model(alias, op, path, settings);
}

model_registry::admin_error model_registry::swap_drain_first(const std::string& alias, const std::string& path,
                                                             const proto::model_settings& settings,
                                                             std::uint64_t need,
                                                             std::vector<std::shared_ptr<model_worker>> victims,
                                                             model_info& out) {
  std::shared_ptr<model_worker> old;
  std::string old_path;
  proto::model_settings old_settings;
  {
    std::lock_guard lk(mu_);
    auto& e = entries_.at(alias);
    old = std::move(e.current);
    old_path = e.path;
    old_settings = e.settings;
    e.draining = old;
    if (old) {
      e.reserved = need > old->bytes() ? need - old->bytes() : 0;
      // Waiting jobs wait for the new model; from here on new ones park behind them.
      auto waiting = old->close_and_take_queued();
      for (auto& j : waiting) e.parked.push_back(std::move(j));
    }
  }
  release(victims);
  if (old) old->join();  // the running request finishes on the old model
  const bool had_old = old != nullptr;
  const std::uint64_t old_bytes = old ? old->bytes() : 0;
  {
    std::lock_guard lk(mu_);
    auto& e = entries_.at(alias);
    e.draining.reset();
    e.reserved = need;
  }
  old.reset();
  auto loaded = open_model(alias, "swap", path, settings);
  if (loaded || !had_old) {
    if (loaded) adopt_swapped(alias, path, settings);
    auto err = finish_load(alias, std::move(loaded), &out);
    if (!err && had_old) {
      std::lock_guard lk(mu_);
      if (auto it = entries_.find(alias); it != entries_.end()) ++it->second.swaps;
    }
    return err;
  }
  // The new file failed: the old one comes back and serves what waited.
  {
    std::lock_guard lk(mu_);
    entries_.at(alias).reserved = old_bytes;
  }
  auto back = open_model(alias, "reload", old_path, old_settings);
  std::string msg = "swap to " + path + " (drain-first): " + loaded.message();
  if (back) msg += "; the old model was loaded again and serves";
  else msg += "; loading the old model " + old_path + " again failed too: " + back.message();
  (void)finish_load(alias, std::move(back), nullptr);
  return wire_error{error_code::load_failed, msg};
}

}  // namespace tandem::daemon
