// Progress for long tool runs on stderr: a bar redrawn in place on a terminal, and plain lines
// at every 10% otherwise, so logs and CI output stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tandem {

class progress {
 public:
  // quiet: print nothing. The mode (bar or lines) follows isatty(fileno(out)).
  explicit progress(std::string label, bool quiet = false, std::FILE* out = stderr);

  // Matches gguf_writer::progress_fn: (items done, items total, bytes done, bytes total).
  void update(size_t items_done, size_t items_total, uint64_t bytes_done, uint64_t bytes_total);
  // Ends the bar's line and prints the elapsed time and rate.
  void finish();

 private:
  std::string label_;
  bool quiet_;
  bool tty_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_;
  int last_decile_ = -1;
  uint64_t bytes_done_ = 0;
  bool drawn_ = false;
};

// "1.50 GiB", "12.0 MiB", "512 B".
std::string format_bytes(uint64_t bytes);

}  // namespace tandem
