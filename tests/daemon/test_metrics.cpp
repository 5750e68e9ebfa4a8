// tandemd's metrics: histogram buckets (inclusive le, _sum, _count), the inter-token gap
// attribution, the exposition text parsed back line by line, and several threads at once.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "exposition_check.h"
#include "metrics/counter.h"
#include "metrics/exposition.h"
#include "metrics/histogram.h"
#include "metrics/metric_family.h"
#include "metrics/serving_metrics.h"
#include "metrics/token_gap_timer.h"

namespace tandem::metrics {
namespace {

using json = nlohmann::json;
using testing::parse_exposition;
using namespace std::chrono_literals;

TEST(histogram, bounds_are_inclusive) {
  histogram h({1, 2, 5});
  h.observe(-3);         // below everything: the first bucket
  h.observe(1);          // exactly a bound: that bound's bucket
  h.observe(1.0000001);  // just past it: the next
  h.observe(5);
  h.observe(7);  // past the last bound: +Inf only
  const auto s = h.snapshot();
  ASSERT_EQ(s.cumulative.size(), 4u);
  EXPECT_EQ(s.cumulative, (std::vector<std::uint64_t>{2, 3, 4, 5}));
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, -3 + 1 + 1.0000001 + 5 + 7);
  EXPECT_EQ(s.bounds, (std::vector<double>{1, 2, 5}));
}

TEST(histogram, observe_n_and_nan) {
  histogram h({0.01, 0.1});
  h.observe_n(0.05, 4);
  h.observe_n(0.05, 0);  // nothing
  h.observe(NAN);        // dropped: the sum stays a number
  const auto s = h.snapshot();
  EXPECT_EQ(s.cumulative, (std::vector<std::uint64_t>{0, 4, 4}));
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.sum, 0.2);
}

TEST(histogram, serving_buckets_span_1ms_to_60s) {
  for (const auto& b : {first_token_buckets(), inter_token_buckets()}) {
    ASSERT_FALSE(b.empty());
    EXPECT_DOUBLE_EQ(b.front(), 0.001);
    EXPECT_DOUBLE_EQ(b.back(), 60);
    for (std::size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
  }
  EXPECT_GE(swap_buckets().back(), 600);
}

TEST(exposition, numbers_names_and_escapes) {
  EXPECT_EQ(format_value(1), "1");
  EXPECT_EQ(format_value(0.005), "0.005");
  EXPECT_EQ(format_value(25275973632.0), "25275973632");
  EXPECT_EQ(format_value(-2.5), "-2.5");
  EXPECT_EQ(format_value(INFINITY), "+Inf");
  EXPECT_EQ(format_value(-INFINITY), "-Inf");
  EXPECT_EQ(format_value(NAN), "NaN");
  EXPECT_EQ(std::stod(format_value(0.1 + 0.2)), 0.1 + 0.2);  // reads back the same
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_TRUE(valid_metric_name("tandem_requests_total"));
  EXPECT_TRUE(valid_metric_name("a:b_c9"));
  EXPECT_FALSE(valid_metric_name("9abc"));
  EXPECT_FALSE(valid_metric_name("a-b"));
  EXPECT_FALSE(valid_metric_name(""));
  EXPECT_TRUE(valid_label_name("le"));
  EXPECT_FALSE(valid_label_name("__name__"));
  EXPECT_FALSE(valid_label_name("a:b"));
}

TEST(exposition, writer_text_parses_back) {
  exposition_writer w;
  w.family("x_requests_total", "Requests.\nSecond line \\ here.", metric_type::counter);
  w.sample("x_requests_total", {{"op", "gen"}, {"odd", "q\"u\\o\nte"}}, std::uint64_t{18446744073709551615ull});
  histogram h({0.5, 1});
  h.observe(0.5);
  h.observe(3);
  w.family("x_seconds", "Durations.", metric_type::histogram);
  w.histogram("x_seconds", {{"model", "m"}}, h.snapshot());
  w.gauge("x_up", "Up.", 1);
  const auto p = parse_exposition(w.text());
  ASSERT_EQ(p.error, "") << w.text();
  EXPECT_EQ(p.families.at("x_requests_total").help, "Requests.\\nSecond line \\\\ here.");
  EXPECT_EQ(p.families.at("x_requests_total").samples[0].label("odd"), "q\"u\\o\nte");
  EXPECT_EQ(p.value("x_requests_total"), 18446744073709551615.0);
  EXPECT_EQ(p.value("x_seconds_bucket", {{"le", "0.5"}}), 1);
  EXPECT_EQ(p.value("x_seconds_bucket", {{"le", "1"}}), 1);
  EXPECT_EQ(p.value("x_seconds_bucket", {{"le", "+Inf"}}), 2);
  EXPECT_EQ(p.value("x_seconds_count"), 2);
  EXPECT_EQ(p.value("x_seconds_sum"), 3.5);
  EXPECT_EQ(p.value("x_up"), 1);
}

// The checker itself: each broken text is caught, so the parse-back tests can fail.
TEST(exposition, checker_rejects_broken_texts) {
  const char* bad[] = {
      "x_total 1\n",                                                    // no HELP/TYPE
      "# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"1} 2\n",   // unterminated value
      "# HELP x h\n# TYPE x counter\nx 1\n",                            // counter without _total
      "# HELP x h\n# TYPE x gauge\nx 1\n# HELP x h\n",                  // HELP after samples
      "# HELP x h\n# TYPE x gauge\nx one\n",                            // not a number
      "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
      "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
      "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",
      "# HELP a h\n# TYPE a gauge\n# HELP b h\n# TYPE b gauge\na 1\nb 1\na 2\n",  // a's lines apart
      "# HELP a h\n# TYPE a gauge\na 1",                                // no final newline
  };
  for (const char* t : bad) EXPECT_NE(parse_exposition(t).error, "") << t;
}

// --- the inter-token gaps --------------------------------------------------------------------------

TEST(token_gap_timer, one_gap_per_token_after_the_first) {
  histogram h(inter_token_buckets());
  token_gap_timer t(&h);
  const auto t0 = token_gap_timer::clock::time_point{} + 1s;
  t.on_step();  // prefill steps before the first token count for nothing
  t.on_step();
  t.on_text(t0);  // the first token
  for (int i = 1; i < 5; ++i) {
    t.on_step();
    t.on_text(t0 + i * 10ms);
  }
  t.on_text(t0 + 41ms);  // a tail flushed without a step: the same token's text
  t.finish(5, 0.040);
  const auto s = h.snapshot();
  EXPECT_EQ(s.count, 4u);
  EXPECT_NEAR(s.sum, 0.040, 1e-9);
  EXPECT_EQ(s.cumulative[4], 4u);  // all in le=0.01
  EXPECT_EQ(s.cumulative[3], 0u);
}

TEST(token_gap_timer, held_back_and_final_tokens_share_the_time) {
  histogram h({0.005, 0.01, 0.02, 0.05});
  token_gap_timer t(&h);
  const auto t0 = token_gap_timer::clock::time_point{} + 1s;
  t.on_text(t0);
  t.on_step();  // a token whose text is held back (part of a character)
  t.on_step();
  t.on_text(t0 + 20ms);  // two tokens in 20 ms: 10 ms each
  EXPECT_EQ(t.observed(), 2u);
  t.on_step();  // the end-of-text token: no text; finish attributes the rest of decode time
  t.finish(4, 0.050);
  const auto s = h.snapshot();
  EXPECT_EQ(s.count, 3u);
  EXPECT_NEAR(s.sum, 0.050, 1e-9);
  EXPECT_EQ(s.cumulative, (std::vector<std::uint64_t>{0, 2, 2, 3, 3}));
}

TEST(token_gap_timer, no_text_at_all_and_no_histogram) {
  histogram h({0.01});
  token_gap_timer t(&h);
  t.finish(3, 0.02);  // nothing came as text: two gaps of the decode time
  EXPECT_EQ(h.snapshot().count, 2u);
  EXPECT_NEAR(h.snapshot().sum, 0.02, 1e-12);
  token_gap_timer single(&h);
  single.finish(1, 0);  // one token has no gap
  EXPECT_EQ(h.snapshot().count, 2u);
  token_gap_timer off(nullptr);
  off.on_step();
  off.on_text(token_gap_timer::clock::now());
  off.finish(10, 1);
  EXPECT_EQ(off.observed(), 0u);
}

// --- tandemd's text ---------------------------------------------------------------------------------

json sample_status() {
  return json::parse(R"({
    "version": "0.1.0", "protocol": 1, "uptime_seconds": 12.5, "draining": false, "connections": 3,
    "in_flight": 2, "queued": 4,
    "memory": {"rss_bytes": 1000, "model_bytes": 900, "budget_bytes": 0, "budget_used_bytes": 900},
    "devices": [{"device": "cpu", "models": ["b"], "model_bytes": 100, "total_bytes": 8000, "available_bytes": 6000},
                {"device": "cuda:0", "models": ["a"], "model_bytes": 800, "total_bytes": 16000, "available_bytes": 15000},
                {"device": "cuda:1", "models": [], "model_bytes": 0}],
    "models": [{"name": "a", "state": "resident", "queued": 4, "running": true, "device": "cuda:0", "bytes": 800,
                "arch": "we\"ird\\arch", "backend": "cuda", "parallel": 4, "sequences": {"running": 2, "waiting": 1}},
               {"name": "b", "state": "unloaded", "queued": 0, "running": false}]
  })");
}

TEST(serving_metrics, text_holds_counters_histograms_and_gauges) {
  daemon::serving_metrics m;
  m.request_done("generate", "ok");
  m.request_done("generate", "ok");
  m.request_done("generate", "busy");
  m.request_done("status", "ok");
  auto& a = m.model("a");
  a.prompt_tokens.add(30);
  a.generated_tokens.add(12);
  a.first_token.observe(0.2);
  a.inter_token.observe_n(0.02, 11);
  m.swap_done("a", "ok", 3.0);
  m.swap_done("a", "load_failed", 1.0);  // counted, its duration not observed
  const std::string text = m.render(sample_status());
  const auto p = parse_exposition(text);
  ASSERT_EQ(p.error, "") << text;
  EXPECT_EQ(p.value("tandem_requests_total", {{"op", "generate"}, {"outcome", "ok"}}), 2);
  EXPECT_EQ(p.value("tandem_requests_total", {{"op", "generate"}, {"outcome", "busy"}}), 1);
  EXPECT_EQ(p.value("tandem_requests_total", {{"op", "generate"}, {"outcome", "cancelled"}}), 0);  // from the start
  EXPECT_EQ(p.value("tandem_requests_total", {{"op", "status"}, {"outcome", "ok"}}), 1);
  EXPECT_EQ(p.value("tandem_prompt_tokens_total", {{"model", "a"}}), 30);
  EXPECT_EQ(p.value("tandem_generated_tokens_total", {{"model", "a"}}), 12);
  EXPECT_EQ(p.value("tandem_generated_tokens_total", {{"model", "b"}}), 0);  // every alias has its series
  EXPECT_EQ(p.value("tandem_time_to_first_token_seconds_count", {{"model", "a"}}), 1);
  EXPECT_EQ(p.value("tandem_time_to_first_token_seconds_bucket", {{"model", "a"}, {"le", "0.1"}}), 0);
  EXPECT_EQ(p.value("tandem_time_to_first_token_seconds_bucket", {{"model", "a"}, {"le", "0.25"}}), 1);
  EXPECT_EQ(p.value("tandem_inter_token_latency_seconds_count", {{"model", "a"}}), 11);
  EXPECT_NEAR(p.value("tandem_inter_token_latency_seconds_sum", {{"model", "a"}}), 0.22, 1e-12);
  EXPECT_EQ(p.value("tandem_swaps_total", {{"model", "a"}, {"outcome", "ok"}}), 1);
  EXPECT_EQ(p.value("tandem_swaps_total", {{"model", "a"}, {"outcome", "load_failed"}}), 1);
  EXPECT_EQ(p.value("tandem_swap_duration_seconds_count", {{"model", "a"}}), 1);
  EXPECT_EQ(p.value("tandem_swap_duration_seconds_sum", {{"model", "a"}}), 3);
  // Gauges from the status figures.
  EXPECT_EQ(p.value("tandem_in_flight_requests"), 2);
  EXPECT_EQ(p.value("tandem_models_resident"), 1);
  EXPECT_EQ(p.value("tandem_model_resident", {{"model", "a"}}), 1);
  EXPECT_EQ(p.value("tandem_model_resident", {{"model", "b"}}), 0);
  EXPECT_EQ(p.value("tandem_queue_depth", {{"model", "a"}}), 4);
  EXPECT_EQ(p.value("tandem_sequences_running", {{"model", "a"}}), 2);
  EXPECT_TRUE(std::isnan(p.value("tandem_sequences_running", {{"model", "b"}})));  // not resident
  EXPECT_EQ(p.value("tandem_model_info", {{"model", "a"}, {"arch", "we\"ird\\arch"}, {"device", "cuda:0"}}), 1);
  EXPECT_EQ(p.value("tandem_device_memory_used_bytes", {{"device", "cuda:0"}}), 1000);
  EXPECT_EQ(p.value("tandem_device_memory_total_bytes", {{"device", "cpu"}}), 8000);
  EXPECT_EQ(p.value("tandem_device_model_bytes", {{"device", "cuda:1"}}), 0);
  EXPECT_TRUE(std::isnan(p.value("tandem_device_memory_total_bytes", {{"device", "cuda:1"}})));  // no answer
  EXPECT_EQ(p.value("tandem_build_info", {{"version", "0.1.0"}}), 1);
}

TEST(serving_metrics, empty_status_still_renders) {
  daemon::serving_metrics m;
  const auto p = parse_exposition(m.render(json::object()));
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.value("tandem_models_resident"), 0);
}

// --- several threads ---------------------------------------------------------------------------------

TEST(metrics_threads, concurrent_updates_add_up_and_scrapes_stay_consistent) {
  constexpr int threads = 4, per_thread = 20000;
  daemon::serving_metrics m;
  histogram h({0.25, 0.5, 1});
  counter c;
  metric_family<counter> fam({"k"});
  std::atomic<bool> done{false};
  std::atomic<int> bad_scrapes{0}, scrapes{0};
  std::thread scraper([&] {
    while (!done.load()) {
      const auto s = h.snapshot();
      if (s.cumulative.back() != s.count) ++bad_scrapes;
      for (std::size_t i = 1; i < s.cumulative.size(); ++i)
        if (s.cumulative[i] < s.cumulative[i - 1]) ++bad_scrapes;
      if (!parse_exposition(m.render(sample_status())).error.empty()) ++bad_scrapes;
      ++scrapes;
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        h.observe(i % 2 ? 0.25 : 0.75);  // exact in binary: the sum can be checked exactly
        c.add();
        fam.at({std::to_string(i % 3)}).add();
        m.request_done("generate", "ok");
        m.model(t % 2 ? "a" : "b").inter_token.observe(0.01);
      }
    });
  for (auto& w : workers) w.join();
  done = true;
  scraper.join();
  EXPECT_EQ(bad_scrapes.load(), 0) << scrapes.load() << " scrapes";
  const auto s = h.snapshot();
  constexpr std::uint64_t n = std::uint64_t{threads} * per_thread;
  EXPECT_EQ(s.count, n);
  EXPECT_EQ(s.cumulative[0], n / 2);
  EXPECT_DOUBLE_EQ(s.sum, 0.25 * (n / 2) + 0.75 * (n / 2));
  EXPECT_EQ(c.value(), n);
  std::uint64_t fam_total = 0;
  fam.each([&](const label_set&, const counter& x) { fam_total += x.value(); });
  EXPECT_EQ(fam_total, n);
  const auto p = parse_exposition(m.render(sample_status()));
  ASSERT_EQ(p.error, "");
  EXPECT_EQ(p.value("tandem_requests_total", {{"op", "generate"}, {"outcome", "ok"}}), double(n));
  EXPECT_EQ(p.value("tandem_inter_token_latency_seconds_count", {{"model", "a"}}) +
                p.value("tandem_inter_token_latency_seconds_count", {{"model", "b"}}),
            double(n));
}

}  // namespace
}  // namespace tandem::metrics
