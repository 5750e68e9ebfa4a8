// Unit tests of what `tandem load` / `swap` / `status` print about a load (load_progress_line.h,
// output.h): decimal sizes and rates, the progress line's text and which load it shows.
#include <gtest/gtest.h>

#include "load_progress_line.h"
#include "output.h"

namespace tandem::client {
namespace {

TEST(LoadFigures, DecimalUnits) {
  EXPECT_EQ(decimal_bytes(0), "0 B");
  EXPECT_EQ(decimal_bytes(999), "999 B");
  EXPECT_EQ(decimal_bytes(1500), "1.5 kB");
  EXPECT_EQ(decimal_bytes(8700000000ull), "8.7 GB");
  EXPECT_EQ(decimal_rate(2.45e10), "24.5 GB/s");
  EXPECT_EQ(decimal_rate(3.2e6), "3.2 MB/s");
  EXPECT_EQ(decimal_rate(-1), "0 B/s");
  // Both in the total's unit, even when done is far smaller.
  EXPECT_EQ(bytes_of_total(3100000000ull, 8700000000ull), "3.1 / 8.7 GB");
  EXPECT_EQ(bytes_of_total(0, 8700000000ull), "0.0 / 8.7 GB");
  EXPECT_EQ(bytes_of_total(400000, 2000000), "0.4 / 2.0 MB");
  EXPECT_EQ(load_seconds(0.004), "4 ms");
  EXPECT_EQ(load_seconds(0.36), "0.36 s");
  EXPECT_EQ(load_seconds(12.34), "12.3 s");
}

TEST(LoadProgressLine, BytesAndRateOnceTheTotalIsKnown) {
  load_in_progress l;
  l.name = "big";
  l.done_bytes = 3100000000ull;
  l.total_bytes = 8700000000ull;
  l.bytes_per_second = 2.45e10;
  EXPECT_EQ(load_line_text("big", &l, 1.2), "loading big  3.1 / 8.7 GB  24.5 GB/s");
  l.total_bytes = 0;  // the engine has not said yet
  EXPECT_EQ(load_line_text("big", &l, 2.7), "loading big... 2s");
  EXPECT_EQ(load_line_text("big", nullptr, 3.0), "loading big... 3s");  // an older daemon: no loads
}

TEST(LoadProgressLine, FindsTheAliasAmongTheLoads) {
  status_reply s;
  EXPECT_EQ(find_load(s, "a"), nullptr);
  s.loads.push_back({"b", "load", "/b.gguf", 1, 2, 0.1, 10});
  s.loads.push_back({"a", "swap", "/a2.gguf", 5, 9, 0.2, 25});
  const load_in_progress* l = find_load(s, "a");
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->path, "/a2.gguf");
  EXPECT_EQ(find_load(s, "c"), nullptr);
}

}  // namespace
}  // namespace tandem::client
