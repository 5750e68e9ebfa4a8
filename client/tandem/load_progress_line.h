// load_progress_line: while `tandem load` / `tandem swap` waits for its reply, one line on a
// terminal's stderr with the load's bytes and rate ("loading NAME  3.1 / 8.7 GB  24.5 GB/s"),
// read from status on a second connection; on a non-terminal stderr nothing is drawn.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "tandem/client.h"

namespace tandem::client {

// The line for `alias`: its bytes and rate once status gives a total, else the seconds waited
// (an older daemon, a load still being admitted, a total not known yet).
std::string load_line_text(const std::string& alias, const load_in_progress* load, double waited_seconds);

// The load of `alias` among status's loads, or nullptr.
const load_in_progress* find_load(const status_reply& status, const std::string& alias);

class load_progress_line {
 public:
  // Polls the daemon at `socket` every `period` once `delay` has passed, so quick loads never
  // flicker. Starts nothing unless stderr is a terminal.
  load_progress_line(std::string socket, std::string alias,
                     std::chrono::milliseconds delay = std::chrono::milliseconds(300),
                     std::chrono::milliseconds period = std::chrono::milliseconds(250));
  ~load_progress_line();
  load_progress_line(const load_progress_line&) = delete;
  load_progress_line& operator=(const load_progress_line&) = delete;

  // Stops and erases the line; idempotent. Call before writing to the same terminal.
  void stop();

 private:
  void loop(std::chrono::milliseconds delay, std::chrono::milliseconds period);
  // One status poll; nullopt when the daemon cannot be asked (the line falls back to seconds).
  std::optional<status_reply> poll();
  void draw(const std::string& line);

  std::string socket_;
  std::string alias_;
  std::optional<connection> conn_;
  bool conn_failed_ = false;  // no second connection, or it broke: stop asking
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool drawn_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

}  // namespace tandem::client
