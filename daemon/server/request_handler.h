// request_handler: carries out decoded requests. Quick ops answer on the I/O thread; generation
// goes to the model's worker, tokenize to a helper pool and load/swap/unload to the admin pool.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>

#include "metrics/serving_metrics.h"
#include "protocol/request.h"
#include "registry/model_registry.h"

namespace tandem::daemon {

class connection;
class connection_manager;

struct handler_context {
  model_registry& registry;
  connection_manager& connections;
  boost::asio::thread_pool& admin;  // loads: may block for minutes
  boost::asio::thread_pool& aux;    // tokenize/detokenize: short
  std::uint32_t max_frame;
  std::chrono::steady_clock::time_point started;
  serving_metrics& metrics;  // outlives the pools and the registry's workers (server.h)
};

class request_handler {
 public:
  explicit request_handler(handler_context ctx) : ctx_(ctx) {}

  void handle(const std::shared_ptr<connection>& c, proto::request req);
  // While draining, new work is refused with shutting_down; status and cancel still answer.
  void set_draining() { draining_ = true; }
  bool draining() const { return draining_; }

  nlohmann::json status_json() const;
  // The metrics op's text (Prometheus exposition format 0.0.4).
  std::string metrics_text() const;
  // A request that could not be decoded: counted under op "invalid".
  void count_undecodable(const proto::wire_error& e) const;

 private:
  void generate(const std::shared_ptr<connection>& c, proto::request_id id, proto::generate_request g);
  void tokenize(const std::shared_ptr<connection>& c, proto::request_id id, const proto::tokenize_request& t);
  void detokenize(const std::shared_ptr<connection>& c, proto::request_id id, proto::detokenize_request d);
  // Runs `work` on the model `alias` for tokenize/detokenize: on the aux pool when the model is
  // resident, else queued on the model like a generation (so a swap or an eviction in between
  // delays the reply instead of failing it).
  void with_model(const std::shared_ptr<connection>& c, proto::request_id id, std::string_view op,
                  const std::string& alias, std::function<std::string(served_model&)> work);
  void admin(const std::shared_ptr<connection>& c, proto::request_id id, proto::request_body body);
  // Registers the id as in flight; answers duplicate_id and returns false if it already is.
  bool track(const std::shared_ptr<connection>& c, proto::request_id id, std::string_view op);

  handler_context ctx_;
  std::atomic<bool> draining_{false};
};

}  // namespace tandem::daemon
