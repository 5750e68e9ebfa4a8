// spinner: a "waiting for NAME... 3s" line on stderr while the client waits for something slow
// whose progress it cannot ask for (a generation's first token; a load has load_progress_line.h);
// on a non-terminal stderr nothing is drawn (logs stay clean).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace tandem::client {

class spinner {
 public:
  // Starts drawing after `delay`, so quick answers never flicker.
  explicit spinner(std::string label, std::chrono::milliseconds delay = std::chrono::milliseconds(300));
  ~spinner();
  spinner(const spinner&) = delete;
  spinner& operator=(const spinner&) = delete;

  // Stops and erases the line; idempotent. Call before writing to the same terminal.
  void stop();

 private:
  void loop(std::chrono::milliseconds delay);

  std::string label_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool drawn_ = false;
  std::thread thread_;
};

}  // namespace tandem::client
