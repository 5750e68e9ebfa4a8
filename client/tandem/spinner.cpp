// The spinner's drawing thread; it owns stderr's current line until stop().
#include "spinner.h"

#include <unistd.h>

#include <cstdio>

namespace tandem::client {

spinner::spinner(std::string label, std::chrono::milliseconds delay) : label_(std::move(label)) {
  if (isatty(STDERR_FILENO)) thread_ = std::thread([this, delay] { loop(delay); });
}

spinner::~spinner() { stop(); }

void spinner::stop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void spinner::loop(std::chrono::milliseconds delay) {
  static constexpr const char* frames[] = {"|", "/", "-", "\\"};
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  if (cv_.wait_for(lock, delay, [this] { return stop_; })) return;
  for (unsigned i = 0; !stop_; ++i) {
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start);
    std::fprintf(stderr, "\r\033[K%s %s... %llds", frames[i % 4], label_.c_str(),
                 static_cast<long long>(secs.count()));
    std::fflush(stderr);
    drawn_ = true;
    cv_.wait_for(lock, std::chrono::milliseconds(120), [this] { return stop_; });
  }
  if (drawn_) {
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }
}

}  // namespace tandem::client
