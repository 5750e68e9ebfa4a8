// Encode throughput on English prose (Google Benchmark; run by hand, not by ctest):
//   build/tests/engine/tokenizer/tokenizer_bench [--benchmark_filter=qwen3]
// Prose: TANDEM_BENCH_TEXT, else /usr/share/common-licenses/GPL-3 (~35 KB, repeated to 1 MiB).
// Vocabularies are found as the reference tests find them; absent ones are skipped.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "test_vocabularies.h"

namespace {

using namespace tandem;

std::string prose() {
  const char* env = std::getenv("TANDEM_BENCH_TEXT");
  auto text = test::read_file(env ? env : "/usr/share/common-licenses/GPL-3");
  if (!text || text->empty()) return {};
  std::string out;
  while (out.size() < (1u << 20)) out += *text;
  return out;
}

void encode_prose(benchmark::State& state, const std::string& name) {
  auto path = test::find_vocabulary(name);
  if (!path) {
    state.SkipWithError((name + " vocabulary not found").c_str());
    return;
  }
  auto tok = test::load_vocabulary(name, *path);
  const std::string text = prose();
  if (!tok || text.empty()) {
    state.SkipWithError("cannot load the vocabulary or the prose");
    return;
  }
  size_t tokens = 0;
  for (auto _ : state) {
    auto ids = tok->encode(text);
    tokens = ids->size();
    benchmark::DoNotOptimize(ids->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
}

void decode_prose(benchmark::State& state, const std::string& name) {
  auto path = test::find_vocabulary(name);
  if (!path) {
    state.SkipWithError((name + " vocabulary not found").c_str());
    return;
  }
  auto tok = test::load_vocabulary(name, *path);
  const std::string text = prose();
  if (!tok || text.empty()) {
    state.SkipWithError("cannot load the vocabulary or the prose");
    return;
  }
  auto ids = tok->encode(text);
  for (auto _ : state) {
    auto s = tok->decode(*ids);
    benchmark::DoNotOptimize(s->data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

BENCHMARK_CAPTURE(encode_prose, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_prose, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode_prose, smollm2, std::string("smollm2"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(decode_prose, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
