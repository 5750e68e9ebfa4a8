// server: startup (socket, preload, READY), the accept loop, signals, the 1 s housekeeping tick
// (idle unload, watchdog, load-time extensions) and the graceful drain on SIGTERM.
#include "server/server.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <set>
#include <thread>

#include "log.h"
#include "plan/plan_parse.h"
#include "protocol/reply.h"
#include "server/connection.h"
#include "server/device_memory.h"
#include "server/listen_socket.h"
#include "systemd/sd_glue.h"

namespace tandem::daemon {

namespace {
constexpr auto tick_period = std::chrono::milliseconds(200);
// Out of file descriptors, accept would fail at once forever (a busy loop, a log line each
// time): pause accepting this long, and say so at most every accept_log_every.
constexpr auto accept_backoff = std::chrono::milliseconds(100);
constexpr auto accept_log_every = std::chrono::seconds(10);

// The CUDA devices the configuration names: gpu, and the ids in gpus and in every model table's gpus
// (the --devices syntax of plan/plan_parse.h; a list it refuses names nothing here, and its load
// reports the error).
std::set<int> configured_gpus(const daemon_config& c) {
  std::set<int> ids;
  if (c.gpu >= 0) ids.insert(c.gpu);
  const auto add_list = [&](const std::string& list) {
    if (auto devs = parse_device_list(list))
      for (const device_request& d : *devs)
        if (d.cuda_id >= 0) ids.insert(d.cuda_id);
  };
  if (!c.gpus.empty()) add_list(c.gpus);
  for (const auto& [alias, settings] : c.model_tables)
    if (settings.gpus) add_list(*settings.gpus);
  return ids;
}

connection_limits limits_of(const daemon_config& c) {
  return {c.max_connections, c.max_connections_per_user, c.frame_timeout, c.idle_timeout, c.max_buffered};
}

// The peer's uid (SO_PEERCRED); a failure reads as uid -1, which counts as its own user.
uid_t peer_uid(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 ? cred.uid : static_cast<uid_t>(-1);
}

// The soft limit on open files raised to the hard one: each client holds a descriptor, and the
// default soft limit (1024) is below what the limits of tandemd.conf(5) allow.
void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  r.rlim_cur = r.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &r) != 0) log(log_level::warning, "cannot raise the open-file limit");
}
constexpr auto extend_every = std::chrono::seconds(10);
constexpr const char* extend_msg = "EXTEND_TIMEOUT_USEC=30000000";  // a load may take a while
constexpr auto cancel_grace = std::chrono::seconds(10);
}  // namespace

server::server(daemon_config cfg, std::vector<std::string> argv, model_loader loader, model_sizer sizer)
    : cfg_(std::move(cfg)), argv_(std::move(argv)),
      registry_(std::move(loader),
                registry_options{cfg_.queue_depth, cfg_.keep_alive, cfg_.memory_budget, std::move(sizer),
                                 cfg_.model_tables,
                                 [this](const std::string& alias, std::string_view outcome, double seconds) {
                                   metrics_.swap_done(alias, outcome, seconds);
                                 }},
                [this](std::function<void()> f) { asio::post(admin_, std::move(f)); }),
      handler_(handler_context{registry_, connections_, admin_, aux_, cfg_.max_frame, started_, metrics_}),
      acceptor_(io_), signals_(io_, SIGTERM, SIGINT, SIGHUP), ticker_(io_) {
  connections_.set_limits(limits_of(cfg_));
}

int server::run() {
  raise_fd_limit();
  // The socket first: clients may connect while models load (their requests wait).
  std::string act_error;
  gid_t socket_gid = getegid();
  if (!cfg_.socket_group.empty()) {
    auto g = resolve_group(cfg_.socket_group);
    if (!g) {
      log(log_level::error, "socket group: ", g.message());
      return exit_failure;
    }
    socket_gid = *g;
  }
  if (auto fd = sd_activated_socket(act_error)) {
    acceptor_.assign(asio::local::stream_protocol(), *fd);
    log(log_level::info, "using the socket passed by systemd");
  } else if (!act_error.empty()) {
    log(log_level::error, act_error);
    return exit_failure;
  } else {
    auto mode = parse_mode(cfg_.socket_mode);
    if (!mode) {
      log(log_level::error, mode.message());
      return exit_failure;
    }
    auto ls = bind_listen_socket({cfg_.socket_path, cfg_.socket_group, *mode});
    if (!ls) {
      log(log_level::error, ls.message());
      return exit_failure;
    }
    acceptor_.assign(asio::local::stream_protocol(), ls->fd);
    socket_path_ = ls->path;
    log(log_level::info, "listening on ", ls->path);
  }
  auto policy = peer_policy::from_names(cfg_.allow_users, cfg_.allow_groups, socket_gid);
  if (!policy) {
    log(log_level::error, "allowed peers: ", policy.message());
    return exit_failure;
  }
  policy_ = std::move(*policy);

  watchdog_ = sd_watchdog_interval();
  asio::co_spawn(io_, accept_loop(), asio::detached);
  wait_signal();
  ticker_.expires_after(tick_period);
  ticker_.async_wait([this](auto ec) { if (!ec) tick(); });
  asio::post(admin_, [this] { preload(); });

  io_.run();

  admin_.join();
  aux_.join();
  registry_.join_all();
  if (!socket_path_.empty()) unlink(socket_path_.c_str());
  log(log_level::info, "stopped");
  return exit_code_;
}

asio::awaitable<void> server::accept_loop() {
  asio::steady_timer pause(io_);
  clock::time_point last_log{};
  for (;;) {
    boost::system::error_code ec;
    auto sock = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      const bool no_fds = ec == asio::error::no_descriptors || ec.value() == ENFILE;
      if (!no_fds || clock::now() - last_log >= accept_log_every) {
        log(log_level::warning, "accept: ", ec.message(), no_fds ? " (" + std::to_string(connections_.size()) +
                                                                        " connections; pausing accepts)" : "");
        last_log = clock::now();
      }
      if (no_fds) {
        pause.expires_after(accept_backoff);
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      continue;
    }
    std::string who;
    if (!policy_->allows(sock.native_handle(), who)) {
      // Refused before any of its bytes are read; one error frame says why.
      log(log_level::notice, "refused ", who);
      const auto f = proto::error_frame(std::nullopt, {proto::error_code::forbidden, "not allowed: " + who});
      asio::write(sock, asio::buffer(f), ec);
      sock.close(ec);
      continue;
    }
    const uid_t uid = peer_uid(sock.native_handle());
    if (auto why = connections_.refusal(uid)) {
      log(log_level::notice, "refused a connection: ", *why);
      const auto f = proto::error_frame(std::nullopt, {proto::error_code::busy, *why});
      asio::write(sock, asio::buffer(f), ec);
      sock.close(ec);
      continue;
    }
    connections_.start(
        std::make_shared<connection>(std::move(sock), connections_, handler_, cfg_.max_frame, uid));
  }
}

void server::wait_signal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    on_signal(sig);
    if (!shutting_down_) wait_signal();
  });
}

void server::on_signal(int sig) {
  if (sig == SIGHUP) {
    if (preloading_) {
      // RELOADING=1 before READY=1 confuses systemd: reload once the preload is done.
      log(log_level::info, "SIGHUP during startup: the configuration is reloaded once the models are loaded");
      reload_after_preload_ = true;
      return;
    }
    log(log_level::info, "SIGHUP: reloading the configuration");
    sd_send("RELOADING=1");
    asio::post(admin_, [this] { reload_config(); });
    return;
  }
  begin_shutdown();
}

// Waits for every configured GPU to answer (a driver or device still coming up at boot), up to
// gpu-wait seconds; false when one never did.
bool server::wait_for_gpus() {
  const auto ids = configured_gpus(cfg_);
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                           std::chrono::duration<double>(cfg_.gpu_wait));
  for (bool logged = false;;) {
    std::string missing;
    for (int id : ids)
      if (!query_gpu_memory(id)) missing += (missing.empty() ? "" : ", ") + std::to_string(id);
    if (missing.empty()) return true;
    if (clock::now() >= deadline || shutting_down_) {
      log(log_level::error, "GPU ", missing, " not ready after ", cfg_.gpu_wait,
          " s (gpu-wait): the CUDA driver does not see it; exiting");
      return false;
    }
    if (!logged) {
      log(log_level::warning, "GPU ", missing, " not ready yet: waiting up to ", cfg_.gpu_wait, " s (gpu-wait)");
      sd_send("STATUS=waiting for GPU " + missing);
      logged = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

void server::preload() {
  if (!wait_for_gpus()) {
    asio::post(io_, [this] {
      exit_code_ = exit_failure;
      begin_shutdown();
    });
    return;
  }
  for (const auto& m : cfg_.models) {
    sd_send("STATUS=loading " + m.alias + " from " + m.path);
    log(log_level::info, "loading '", m.alias, "' from ", m.path);
    model_info info;
    if (auto err = registry_.load(m.alias, m.path, {}, info))
      log(log_level::error, "preloading '", m.alias, "' failed: ", err->message);
    else
      log(log_level::info, "'", m.alias, "' is resident (", info.arch, ", ", info.file_bytes, " bytes",
          info.load ? ", loaded in " + std::to_string(info.load->seconds) + " s" : std::string(), ")");
  }
  asio::post(io_, [this] {
    preloading_ = false;
    if (shutting_down_) return;
    const auto n = registry_.size();
    sd_send("READY=1\nSTATUS=serving " + std::to_string(n) + " model(s)");
    log(log_level::info, "ready: ", n, " model(s)");
    if (reload_after_preload_) {
      reload_after_preload_ = false;
      on_signal(SIGHUP);
    }
  });
}

void server::reload_config() {
  auto parsed = reparse_config(argv_);
  if (parsed.exit_now) {
    log(log_level::error, "SIGHUP: keeping the old configuration: ", parsed.output);
    sd_send("READY=1");
    return;
  }
  auto& c = parsed.config;
  log_level lvl;
  if (parse_log_level(c.log_level, lvl)) set_log_level(lvl);
  // Tables apply to loads from now on. Models: load new aliases, swap changed paths; aliases
  // loaded at runtime are left alone.
  registry_.set_tables(c.model_tables);
  const auto current = registry_.describe();
  for (const auto& m : c.models) {
    const nlohmann::json* found = nullptr;
    for (const auto& e : current)
      if (e["name"] == m.alias) found = &e;
    model_info info;
    std::optional<proto::wire_error> err;
    if (!found) err = registry_.load(m.alias, m.path, {}, info);
    else if ((*found)["path"] != m.path) err = registry_.swap(m.alias, m.path, {}, info);
    if (err) log(log_level::error, "SIGHUP: '", m.alias, "': ", err->message);
  }
  auto policy = peer_policy::from_names(c.allow_users, c.allow_groups,
                                        c.socket_group.empty() ? getegid() : resolve_group(c.socket_group).value());
  asio::post(io_, [this, c, p = std::move(policy)]() mutable {
    if (p) policy_ = std::move(*p);
    else log(log_level::error, "SIGHUP: allowed peers unchanged: ", p.message());
    cfg_.allow_users = c.allow_users;
    cfg_.allow_groups = c.allow_groups;
    connections_.set_limits(limits_of(c));
    sd_send("READY=1\nSTATUS=serving " + std::to_string(registry_.size()) + " model(s)");
    log(log_level::info, "configuration reloaded");
  });
}

void server::tick() {
  const auto now = clock::now();
  if (preloading_ && now - last_extend_ >= extend_every) {
    sd_send(extend_msg);
    last_extend_ = now;
  }
  connections_.sweep(now);
  // Idle unload and joining retired models block briefly: keep them off the I/O thread.
  if (!shutting_down_) asio::post(admin_, [this] { registry_.sweep(); });
  // The ping means: the I/O loop turns (we are here) and every resident model reports healthy.
  if (watchdog_ && now - last_watchdog_ >= *watchdog_ / 2) {
    if (registry_.healthy()) sd_send("WATCHDOG=1");
    else log(log_level::error, "a model reports unhealthy; withholding the watchdog ping");
    last_watchdog_ = now;
  }
  if (shutting_down_) {
    const bool idle = registry_.drained() && connections_.in_flight() == 0;
    if (idle || (cancelled_all_ && now > drain_deadline_ + cancel_grace)) return finish_shutdown();
    if (!cancelled_all_ && now > drain_deadline_) {
      log(log_level::warning, "drain timeout: cancelling ", connections_.in_flight(), " request(s)");
      connections_.cancel_all();
      cancelled_all_ = true;
    }
  }
  ticker_.expires_after(tick_period);
  ticker_.async_wait([this](auto ec) { if (!ec) tick(); });
}

void server::begin_shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  sd_send("STOPPING=1\nSTATUS=draining");
  log(log_level::info, "stopping: draining ", connections_.in_flight(), " request(s)");
  handler_.set_draining();
  boost::system::error_code ec;
  acceptor_.close(ec);
  registry_.close_all();  // queued and running requests still finish
  drain_deadline_ = clock::now() + std::chrono::duration_cast<clock::duration>(
                                       std::chrono::duration<double>(cfg_.drain_timeout));
}

void server::finish_shutdown() {
  connections_.stop_all();
  signals_.cancel();
  ticker_.cancel();
  io_.stop();
}

}  // namespace tandem::daemon
