// Progress display: the bar is redrawn with '\r' only on a terminal; elsewhere each 10% step
// is one line, so a 6 GB write leaves ten lines in a log rather than thousands.
#include "progress.h"

#include <unistd.h>

namespace tandem {

std::string format_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

progress::progress(std::string label, bool quiet, std::FILE* out)
    : label_(std::move(label)),
      quiet_(quiet),
      tty_(isatty(fileno(out)) != 0),
      out_(out),
      start_(std::chrono::steady_clock::now()) {}

void progress::update(size_t items_done, size_t items_total, uint64_t bytes_done,
                      uint64_t bytes_total) {
  bytes_done_ = bytes_done;
  if (quiet_) return;
  const double frac = bytes_total ? static_cast<double>(bytes_done) / static_cast<double>(bytes_total)
                                  : (items_total ? static_cast<double>(items_done) / items_total : 1.0);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = secs > 0 ? static_cast<double>(bytes_done) / secs : 0.0;
  if (tty_) {
    constexpr int width = 30;
    const int filled = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(width, ' ');
    const double eta = rate > 0 ? static_cast<double>(bytes_total - bytes_done) / rate : 0.0;
    std::fprintf(out_, "\r%s [%s] %3d%% %zu/%zu tensors %s/s ETA %.0fs   ", label_.c_str(),
                 bar.c_str(), static_cast<int>(frac * 100), items_done, items_total,
                 format_bytes(static_cast<uint64_t>(rate)).c_str(), eta);
    drawn_ = true;
  } else {
    const int decile = static_cast<int>(frac * 10);
    if (decile == last_decile_) return;
    last_decile_ = decile;
    std::fprintf(out_, "%s: %d%% (%zu/%zu tensors, %s of %s)\n", label_.c_str(), decile * 10,
                 items_done, items_total, format_bytes(bytes_done).c_str(),
                 format_bytes(bytes_total).c_str());
  }
  std::fflush(out_);
}

void progress::finish() {
  if (quiet_) return;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (drawn_) std::fputc('\n', out_);
  std::fprintf(out_, "%s: done, %s in %.1f s\n", label_.c_str(), format_bytes(bytes_done_).c_str(),
               secs);
  std::fflush(out_);
}

}  // namespace tandem
