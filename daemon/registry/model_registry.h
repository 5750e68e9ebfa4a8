// model_registry: aliases → loaded models, with hot swap, idle unload, lazy reload and a memory
// budget with LRU eviction (see DESIGN.md "Hot swap semantics" and tandemd(8)). Loads and joins
// block, so they run on admin threads; lookups and submissions are quick and run on the I/O thread.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "protocol/wire_error.h"
#include "registry/model_worker.h"
#include "registry/served_model.h"

namespace tandem::daemon {

struct registry_options {
  std::size_t max_queue = 16;      // waiting jobs per model; more → busy
  double keep_alive_s = 0;         // idle seconds before unload; 0: keep loaded
  std::uint64_t memory_budget = 0; // bytes of all resident models together; 0: unlimited
  model_sizer sizer;               // a load's bytes before loading; used only with a budget
  // Per alias: its [model.NAME] table, which a load's own options override (set_tables on SIGHUP).
  std::map<std::string, proto::model_settings> tables;
  // Told of every swap that began (the alias existed and was not busy) once it ends: outcome
  // "ok" or the error code, and its seconds. Called on the admin thread that ran the swap.
  std::function<void(const std::string& alias, std::string_view outcome, double seconds)> on_swap;
};

// A model's `load` in the models and load replies: {bytes, seconds, bytes_per_second}.
nlohmann::json load_json(const load_record& r);

// Runs blocking work (a model load) somewhere other than the caller's thread.
using admin_executor = std::function<void(std::function<void()>)>;

class model_registry {
 public:
  model_registry(model_loader loader, registry_options opt, admin_executor admin);
  ~model_registry();

  // Blocking. On success `out` describes the new model; an error is the reply to send. `settings`
  // (the request's) override the alias's table; the merged settings are kept for its reloads.
  using admin_error = std::optional<proto::wire_error>;
  admin_error load(const std::string& alias, const std::string& path, const proto::model_settings& settings,
                   model_info& out);
  // Loads beside the old model and repoints the alias; queued jobs move to the new model, the
  // running one finishes on the old. A failed load leaves the old model serving. When the
  // budget cannot hold both, drain-first: requests wait while the old model finishes its running
  // request and is unloaded, then the new one loads (or, if that fails, the old one again).
  // The new model gets the table's settings under `settings`, not those of the earlier load.
  admin_error swap(const std::string& alias, const std::string& path, const proto::model_settings& settings,
                   model_info& out);
  // Removes the alias; jobs already accepted still run (the old instance drains).
  admin_error unload(const std::string& alias);

  // Quick. Queues a job on the alias's model ("" = the default alias), parking it while that
  // model loads. An error says why it was refused; the job's callbacks were not called.
  std::optional<proto::wire_error> submit(const std::string& alias, model_job job);
  // The resident model of an alias, for tokenize/detokenize.
  result<std::shared_ptr<model_worker>> resident(const std::string& alias) const;

  // Unloads models idle past their keep_alive; joins retired instances that have drained.
  void sweep(model_worker::clock::time_point now = model_worker::clock::now());
  // Stops taking work and fails parked jobs; running and queued jobs continue to completion.
  void close_all();
  bool drained() const;
  void join_all();  // blocking

  nlohmann::json describe() const;  // the `models` reply
  // status's `loads`: every load, reload and swap whose open is running, with its bytes so far.
  nlohmann::json describe_loads() const;
  std::string default_alias() const;
  bool healthy() const;  // every instance that may run a job reports healthy
  std::size_t size() const;
  // Bytes counted against the budget: resident, draining and retired models plus reservations
  // of loads in progress.
  std::uint64_t used_bytes() const;
  std::uint64_t memory_budget() const { return opt_.memory_budget; }
  // Replaces the tables for loads from now on; resident models keep the settings they have.
  void set_tables(std::map<std::string, proto::model_settings> tables);
  // The alias's table under `request`: what a load of it now would use.
  proto::model_settings settings_for(const std::string& alias, const proto::model_settings& request) const;

 private:
  enum class state { loading, resident, unloaded };
  // An open of a model file for an alias while it runs (and until finish_load takes its figures).
  struct open_in_progress {
    std::string op;    // load; reload (a request for an unloaded alias, a failed drain-first swap's old file); swap
    std::string path;  // the file being opened: a swap's new one, or its old one being restored
    std::shared_ptr<load_progress> progress;  // the loader's counters; shared so a reader never dangles
    model_worker::clock::time_point started{};
    std::optional<model_worker::clock::time_point> ended;  // the loader returned
  };
  struct entry {
    std::string path;
    proto::model_settings settings;  // table and request merged: what it is (re)loaded with
    double keep_alive_s = 0;
    std::shared_ptr<model_worker> current;
    std::shared_ptr<model_worker> draining;  // drain-first swap: the old model finishing its job
    std::uint64_t reserved = 0;               // budget held for a load of this alias in progress
    bool admin_busy = false;  // a load/swap of this alias is running
    std::optional<open_in_progress> opening;  // its open of a model file, while that runs
    std::deque<model_job> parked;
    model_worker::clock::time_point loaded_at{};
    std::uint64_t swaps = 0;
  };

  static state state_of(const entry& e);
  std::string resolve(const std::string& alias) const;  // caller holds mu_
  void start_reload(const std::string& alias, entry& e);  // caller holds mu_
  // A swap's new model loaded: the entry takes its path and settings.
  void adopt_swapped(const std::string& alias, const std::string& path, const proto::model_settings& settings);
  // swap() once the alias is marked busy: the load beside, or drain-first.
  admin_error swap_admitted(const std::string& alias, const std::string& path, const proto::model_settings& settings,
                            model_info& out);
  // The loader, with a load_progress that status reads while it runs (entry.opening).
  result<std::unique_ptr<served_model>> open_model(const std::string& alias, const std::string& op,
                                                   const std::string& path, const proto::model_settings& settings);
  admin_error finish_load(const std::string& alias, result<std::unique_ptr<served_model>> m, model_info* out);
  static void fail_all(std::deque<model_job>& jobs, const proto::wire_error& e);

  // The memory budget. `freed` is what the caller will release first (the old model of a
  // drain-first swap). Picks idle models, least recently used first, until `need` fits; an error
  // (nothing evicted then) names the sizes. Caller holds mu_.
  std::optional<std::string> make_room(const std::string& alias, std::uint64_t need, std::uint64_t freed,
                                       std::vector<std::shared_ptr<model_worker>>& victims);
  std::uint64_t used_locked() const;
  // Blocking: predicts the load's bytes, evicts what must go and reserves the budget for `alias`.
  std::optional<std::string> admit(const std::string& alias, const std::string& path,
                                   const proto::model_settings& settings);
  // admit, then the loader (`op` as in open_in_progress).
  result<std::unique_ptr<served_model>> load_fitting(const std::string& alias, const std::string& op,
                                                     const std::string& path, const proto::model_settings& settings);
  admin_error swap_drain_first(const std::string& alias, const std::string& path,
                               const proto::model_settings& settings, std::uint64_t need,
                               std::vector<std::shared_ptr<model_worker>> victims, model_info& out);
  void release(std::vector<std::shared_ptr<model_worker>>& victims);  // blocking: closes and joins
  void reap_retired();  // joins retired instances that have drained (blocking, briefly)

  model_loader loader_;
  registry_options opt_;
  admin_executor admin_;

  mutable std::mutex mu_;
  std::map<std::string, entry> entries_;
  std::string default_;
  std::vector<std::shared_ptr<model_worker>> retired_;
  std::uint64_t evicting_ = 0;  // bytes of evicted instances not yet joined
  bool closed_ = false;
};

}  // namespace tandem::daemon
