// model_registry: aliases → loaded models, with hot swap, idle unload and lazy reload (see
// DESIGN.md "Hot swap semantics" and tandemd(8)). Loads and joins block, so they run on admin
// threads; lookups and submissions are quick and run on the I/O thread.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "protocol/wire_error.h"
#include "registry/model_instance.h"
#include "registry/served_model.h"

namespace tandem::daemon {

struct registry_options {
  std::size_t max_queue = 16;  // waiting jobs per model; more → busy
  double keep_alive_s = 0;     // idle seconds before unload; 0: keep loaded
};

// Runs blocking work (a model load) somewhere other than the caller's thread.
using admin_executor = std::function<void(std::function<void()>)>;

class model_registry {
 public:
  model_registry(model_loader loader, registry_options opt, admin_executor admin);
  ~model_registry();

  // Blocking. On success `out` describes the new model; an error is the reply to send.
  using admin_error = std::optional<proto::wire_error>;
  admin_error load(const std::string& alias, const std::string& path, std::optional<double> keep_alive_s,
                   model_info& out);
  // Loads beside the old model and repoints the alias; queued jobs move to the new model, the
  // running one finishes on the old. A failed load leaves the old model serving.
  admin_error swap(const std::string& alias, const std::string& path, model_info& out);
  // Removes the alias; jobs already accepted still run (the old instance drains).
  admin_error unload(const std::string& alias);

  // Quick. Queues a job on the alias's model ("" = the default alias), parking it while that
  // model loads. An error says why it was refused; the job's callbacks were not called.
  std::optional<proto::wire_error> submit(const std::string& alias, model_job job);
  // The resident model of an alias, for tokenize/detokenize.
  result<std::shared_ptr<model_instance>> resident(const std::string& alias) const;

  // Unloads models idle past their keep_alive; joins retired instances that have drained.
  void sweep(model_instance::clock::time_point now = model_instance::clock::now());
  // Stops taking work and fails parked jobs; running and queued jobs continue to completion.
  void close_all();
  bool drained() const;
  void join_all();  // blocking

  nlohmann::json describe() const;  // the `models` reply
  std::string default_alias() const;
  bool healthy() const;
  std::size_t size() const;

 private:
  enum class state { loading, resident, unloaded };
  struct entry {
    std::string path;
    double keep_alive_s = 0;
    std::shared_ptr<model_instance> current;
    bool admin_busy = false;  // a load/swap of this alias is running
    std::deque<model_job> parked;
    model_instance::clock::time_point loaded_at{};
    std::uint64_t swaps = 0;
  };

  static state state_of(const entry& e);
  std::string resolve(const std::string& alias) const;  // caller holds mu_
  void start_reload(const std::string& alias, entry& e);  // caller holds mu_
  admin_error finish_load(const std::string& alias, result<std::unique_ptr<served_model>> m, model_info* out);
  static void fail_all(std::deque<model_job>& jobs, const proto::wire_error& e);

  model_loader loader_;
  registry_options opt_;
  admin_executor admin_;

  mutable std::mutex mu_;
  std::map<std::string, entry> entries_;
  std::string default_;
  std::vector<std::shared_ptr<model_instance>> retired_;
  bool closed_ = false;
};

}  // namespace tandem::daemon
