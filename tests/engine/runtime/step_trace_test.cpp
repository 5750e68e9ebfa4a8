// TANDEM_SCHEDULER_TRACE: a line per scheduler pass whose token counts add up to what the requests
// fed and generated, and nothing written when the variable is unset.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include "scheduler_test_util.h"

namespace tandem {
namespace {

using namespace test;

TEST(step_trace, one_line_per_pass_with_its_tokens) {
  const auto path = (std::filesystem::temp_directory_path() / ("tandem-trace-" + std::to_string(::getpid()))).string();
  std::filesystem::remove(path);
  ::setenv("TANDEM_SCHEDULER_TRACE", path.c_str(), 1);
  uint64_t steps = 0;
  {
    auto e = make_engine("qwen3", 2, 128);
    scheduler s(*e.be, *e.cache, text_of, {.chunk_tokens = 16, .prefix_reuse = false});
    ::unsetenv("TANDEM_SCHEDULER_TRACE");  // read at construction
    std::vector<std::future<result<generate_result>>> runs;
    for (int i = 0; i < 3; ++i)
      runs.push_back(std::async(std::launch::async, [&s, i] { return s.generate(greedy(prompt_of(i, 20 + 9 * i), 8), {}); }));
    for (auto& r : runs) {
      auto res = r.get();
      ASSERT_TRUE(res.ok()) << res.message();
      ASSERT_EQ(res->tokens.size(), 8u);
    }
    steps = s.counts().steps;
  }  // the scheduler closes its trace
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line.rfind("# t_us plan_us forward_us post_us gap_us decode prefill rows", 0), 0u) << line;
  uint64_t lines = 0, decode = 0, prefill = 0, rows = 0;
  long long last_t = -1;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    long long t, plan, fwd, post, gap;
    unsigned d, p, r;
    ASSERT_TRUE(f >> t >> plan >> fwd >> post >> gap >> d >> p >> r) << line;
    EXPECT_GE(t, last_t);
    EXPECT_GE(plan, 0);
    EXPECT_GE(fwd, 0);
    EXPECT_GE(post, 0);
    EXPECT_GE(gap, 0);
    last_t = t, ++lines, decode += d, prefill += p, rows += r;
  }
  EXPECT_EQ(lines, steps);
  EXPECT_EQ(prefill, 20u + 29u + 38u);  // every prompt token once (no prefix reuse)
  EXPECT_EQ(decode, 3u * 7u);           // tokens 1..7 of each fed back; the 8th ends it
  EXPECT_EQ(rows, decode + 3u);         // each prompt's last pass samples its first token
  std::filesystem::remove(path);
}

TEST(step_trace, off_without_the_variable) {
  ::unsetenv("TANDEM_SCHEDULER_TRACE");
  const step_trace t;
  EXPECT_FALSE(t.on());
  const step_trace bad("/nonexistent-dir/trace");  // reported on stderr, then off
  EXPECT_FALSE(bad.on());
}

}  // namespace
}  // namespace tandem
