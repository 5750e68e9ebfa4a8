// The load progress line's polling thread; it owns stderr's current line until stop().
#include "load_progress_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

#include "output.h"

namespace tandem::client {

namespace {
// A status reply normally comes in milliseconds; this bounds how long stop() can wait on one.
constexpr std::chrono::milliseconds status_timeout{2000};
}  // namespace

std::string load_line_text(const std::string& alias, const load_in_progress* load, double waited_seconds) {
  if (!load || load->total_bytes == 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "... %llds", static_cast<long long>(waited_seconds));
    return "loading " + alias + buf;
  }
  return "loading " + alias + "  " + bytes_of_total(load->done_bytes, load->total_bytes) + "  " +
         decimal_rate(load->bytes_per_second);
}

const load_in_progress* find_load(const status_reply& status, const std::string& alias) {
  for (const auto& l : status.loads)
    if (l.name == alias) return &l;
  return nullptr;
}

load_progress_line::load_progress_line(std::string socket, std::string alias, std::chrono::milliseconds delay,
                                       std::chrono::milliseconds period)
    : socket_(std::move(socket)), alias_(std::move(alias)) {
  if (isatty(STDERR_FILENO)) thread_ = std::thread([this, delay, period] { loop(delay, period); });
}

load_progress_line::~load_progress_line() { stop(); }

void load_progress_line::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<status_reply> load_progress_line::poll() {
  if (conn_failed_) return std::nullopt;
  if (!conn_) {
    auto c = connection::connect(socket_);
    if (!c.ok()) {
      conn_failed_ = true;
      return std::nullopt;
    }
    c->set_timeout(status_timeout);
    conn_.emplace(std::move(*c));
  }
  auto r = conn_->status();
  if (!r.ok()) {
    conn_failed_ = !conn_->usable();  // a daemon error leaves it usable: ask again next time
    return std::nullopt;
  }
  return std::move(*r);
}

void load_progress_line::draw(const std::string& line) {
  // Cut to the terminal's width: a wrapped line could not be redrawn in place.
  std::string shown = line;
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && shown.size() >= ws.ws_col)
    shown.resize(ws.ws_col - 1);
  std::fprintf(stderr, "\r\033[K%s", shown.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void load_progress_line::loop(std::chrono::milliseconds delay, std::chrono::milliseconds period) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  if (cv_.wait_for(lock, delay, [this] { return stop_; })) return;
  while (!stop_) {
    lock.unlock();  // the poll takes a round trip: stop() must not wait for the lock meanwhile
    const auto status = poll();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string line = load_line_text(alias_, status ? find_load(*status, alias_) : nullptr, waited);
    lock.lock();
    if (stop_) break;
    draw(line);
    cv_.wait_for(lock, period, [this] { return stop_; });
  }
  if (drawn_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
}

}  // namespace tandem::client
