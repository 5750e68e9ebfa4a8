// Unit tests of `tandem loadgen`'s arithmetic (load_stats.h): nearest-rank percentiles and the
// summary's sums, rates and failure bookkeeping, as tandem(1) documents them.
#include <gtest/gtest.h>

#include "load_stats.h"

namespace tandem::client {
namespace {

TEST(Percentile, NearestRank) {
  const std::vector<double> v = {15, 20, 35, 40, 50};  // the textbook example, given unsorted below
  EXPECT_EQ(percentile({50, 15, 40, 20, 35}, 5), 15);
  EXPECT_EQ(percentile(v, 30), 20);
  EXPECT_EQ(percentile(v, 40), 20);  // exactly 2 of 5: rank 2, not interpolated
  EXPECT_EQ(percentile(v, 50), 35);
  EXPECT_EQ(percentile(v, 99), 50);
  EXPECT_EQ(percentile(v, 100), 50);
  EXPECT_EQ(percentile(v, 0), 15);  // clamped to the first rank
}

TEST(Percentile, HundredValues) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(percentile(v, 50), 50);
  EXPECT_EQ(percentile(v, 99), 99);
  EXPECT_EQ(percentile(v, 99.5), 100);
}

TEST(Percentile, EmptyAndSingle) {
  EXPECT_FALSE(percentile({}, 50).has_value());
  EXPECT_EQ(percentile({7}, 1), 7);
  EXPECT_EQ(percentile({7}, 99), 7);
  EXPECT_FALSE(mean({}).has_value());
  EXPECT_DOUBLE_EQ(*mean({1, 2, 6}), 3);
}

request_sample ok_sample(double ttft, std::vector<double> gaps, std::uint64_t gen, std::uint64_t prompt,
                         double rate) {
  request_sample s;
  s.ok = true;
  s.ttft_s = ttft;
  s.gaps_s = std::move(gaps);
  s.generated_tokens = gen;
  s.prompt_tokens = prompt;
  s.decode_tok_s = rate;
  return s;
}

request_sample failed(exit_status st, std::string msg) {
  request_sample s;
  s.status = st;
  s.error = std::move(msg);
  s.ttft_s = 9.0;  // a partial stream's timings must not count
  s.gaps_s = {9.0};
  s.generated_tokens = 1000;
  return s;
}

TEST(Summarize, SumsRatesAndPercentiles) {
  const std::vector<request_sample> samples = {ok_sample(0.010, {0.001, 0.002}, 3, 5, 100),
                                               ok_sample(0.030, {0.004}, 2, 7, 300)};
  const auto s = summarize(samples, 0.5);
  EXPECT_EQ(s.requests, 2u);
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(s.first_error, "");
  EXPECT_EQ(s.generated_tokens, 5u);
  EXPECT_EQ(s.prompt_tokens, 12u);
  EXPECT_DOUBLE_EQ(s.aggregate_tok_s, 10.0);  // 5 tokens in 0.5 s
  EXPECT_DOUBLE_EQ(*s.mean_request_tok_s, 200.0);
  EXPECT_DOUBLE_EQ(*s.ttft_p50_ms, 10.0);
  EXPECT_DOUBLE_EQ(*s.ttft_p99_ms, 30.0);
  EXPECT_DOUBLE_EQ(*s.itl_p50_ms, 2.0);  // gaps over all requests: 1, 2, 4 ms
  EXPECT_DOUBLE_EQ(*s.itl_p99_ms, 4.0);
  EXPECT_FALSE(s.reused_tokens.has_value());  // no result carried reused_tokens
}

TEST(Summarize, FailuresAreCountedNotTimed) {
  const std::vector<request_sample> samples = {ok_sample(0.020, {}, 4, 1, 50),
                                               failed(exit_status::busy, "busy: queue full"),
                                               failed(exit_status::protocol, "tandemd closed the connection")};
  const auto s = summarize(samples, 2.0);
  EXPECT_EQ(s.requests, 3u);
  EXPECT_EQ(s.failures, 2u);
  EXPECT_EQ(s.first_status, exit_status::busy);
  EXPECT_EQ(s.first_error, "busy: queue full");
  EXPECT_EQ(s.generated_tokens, 4u);
  EXPECT_DOUBLE_EQ(s.aggregate_tok_s, 2.0);
  EXPECT_DOUBLE_EQ(*s.ttft_p99_ms, 20.0);
  EXPECT_FALSE(s.itl_p50_ms.has_value());  // one chunk per request: no gaps at all
}

TEST(Summarize, ReusedTokensOnlyWhenReported) {
  auto a = ok_sample(0.01, {}, 1, 10, 1);
  auto b = ok_sample(0.01, {}, 1, 10, 1);
  auto c = ok_sample(0.01, {}, 1, 10, 1);
  a.reused_tokens = 0;
  b.reused_tokens = 8;  // c comes from a result without the field
  const auto s = summarize({a, b, c}, 1.0);
  ASSERT_TRUE(s.reused_tokens.has_value());
  EXPECT_EQ(*s.reused_tokens, 8u);
  EXPECT_EQ(summarize({a}, 1.0).reused_tokens, std::optional<std::uint64_t>(0));
}

TEST(Summarize, NothingRecorded) {
  const auto s = summarize({}, 0.0);
  EXPECT_EQ(s.requests, 0u);
  EXPECT_DOUBLE_EQ(s.aggregate_tok_s, 0.0);  // no division by a zero wall time
  EXPECT_FALSE(s.mean_request_tok_s.has_value());
  EXPECT_FALSE(s.ttft_p50_ms.has_value());
}

}  // namespace
}  // namespace tandem::client
