// server: the top-level object of tandemd. Owns the I/O context (one thread), the listening
// socket, the registry, the admin and helper thread pools, signals and the systemd lifecycle.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>

#include "config/daemon_config.h"
#include "metrics/serving_metrics.h"
#include "registry/model_registry.h"
#include "server/connection_manager.h"
#include "server/peer_policy.h"
#include "server/request_handler.h"

namespace tandem::daemon {

namespace asio = boost::asio;

class server {
 public:
  // `argv` is kept for SIGHUP, which re-reads the config file with the same command line.
  // `sizer` predicts a load's bytes for memory-budget (unused without a budget).
  server(daemon_config cfg, std::vector<std::string> argv, model_loader loader, model_sizer sizer = {});
  // Listens, preloads, serves until SIGTERM/SIGINT and drains. Returns the exit status.
  int run();

 private:
  using clock = std::chrono::steady_clock;

  asio::awaitable<void> accept_loop();
  void wait_signal();
  void on_signal(int sig);
  void preload();
  void reload_config();
  void tick();
  void begin_shutdown();
  void finish_shutdown();

  daemon_config cfg_;
  std::vector<std::string> argv_;
  clock::time_point started_ = clock::now();
  // Before the pools and the registry: their threads report into it until they are joined.
  serving_metrics metrics_;
  asio::io_context io_{1};
  asio::thread_pool admin_{2};
  asio::thread_pool aux_{2};
  model_registry registry_;
  connection_manager connections_;
  request_handler handler_;
  asio::local::stream_protocol::acceptor acceptor_;
  asio::signal_set signals_;
  asio::steady_timer ticker_;
  std::optional<peer_policy> policy_;
  std::string socket_path_;  // ours to unlink at exit (empty when activated)

  bool wait_for_gpus();
  int exit_code_ = exit_ok;
  bool preloading_ = true;
  bool reload_after_preload_ = false;  // a SIGHUP came before READY=1
  std::atomic<bool> shutting_down_{false};  // read by the admin thread while it waits for GPUs
  bool cancelled_all_ = false;
  clock::time_point drain_deadline_{};
  clock::time_point last_extend_{};
  std::optional<std::chrono::microseconds> watchdog_;
  clock::time_point last_watchdog_{};
};

}  // namespace tandem::daemon
