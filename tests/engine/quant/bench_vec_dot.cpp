// vec_dot throughput per type on one core (not part of ctest):
//   build-*/tests/engine/quant/quant_bench --benchmark_filter=vec_dot
// "bytes_per_second" counts the quantized weight bytes read. Two sizes per type: a 1 MiB matrix
// (stays in L2/L3: kernel speed) and a 256 MiB one (streams from DRAM: what a matvec sees).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "quant/quant.h"

namespace {

using tandem::ggml_type;

struct matrix {
  std::vector<uint8_t> data;
  std::vector<float> x;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t row_bytes = 0;
};

matrix make_matrix(ggml_type t, int64_t cols, uint64_t target_bytes) {
  matrix m;
  m.cols = cols;
  m.row_bytes = *tandem::row_bytes(t, static_cast<uint64_t>(cols));
  m.rows = static_cast<int64_t>(target_bytes / m.row_bytes);
  if (m.rows < 1) m.rows = 1;
  m.data.resize(m.row_bytes * static_cast<uint64_t>(m.rows));
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  // Quantize a handful of distinct rows and repeat them (quantizing 256 MiB would take long).
  std::vector<std::vector<uint8_t>> distinct(8, std::vector<uint8_t>(m.row_bytes));
  for (auto& d : distinct) {
    for (auto& v : row) v = dist(rng);
    tandem::quantize_row(t, row.data(), d.data(), cols);
  }
  for (int64_t r = 0; r < m.rows; ++r) {
    const auto& d = distinct[static_cast<size_t>(r) % distinct.size()];
    std::copy(d.begin(), d.end(),
              m.data.begin() + static_cast<std::ptrdiff_t>(m.row_bytes * static_cast<uint64_t>(r)));
  }
  m.x.resize(static_cast<size_t>(cols));
  for (auto& v : m.x) v = dist(rng);
  return m;
}

void bm_vec_dot(benchmark::State& state, ggml_type t, uint64_t bytes) {
  const matrix m = make_matrix(t, 4096, bytes);
  float sink = 0.0f;
  for (auto _ : state) {
    for (int64_t r = 0; r < m.rows; ++r) {
      sink += tandem::vec_dot(t, m.data.data() + m.row_bytes * static_cast<uint64_t>(r), m.x.data(), m.cols);
    }
    benchmark::DoNotOptimize(sink);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(m.data.size()));
}

void bm_dequantize(benchmark::State& state, ggml_type t) {
  const matrix m = make_matrix(t, 4096, 1 << 20);
  std::vector<float> out(static_cast<size_t>(m.cols));
  for (auto _ : state) {
    for (int64_t r = 0; r < m.rows; ++r) {
      tandem::dequantize_row(t, m.data.data() + m.row_bytes * static_cast<uint64_t>(r), out.data(), m.cols);
      benchmark::ClobberMemory();
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(m.data.size()));
}

void bm_quantize(benchmark::State& state, ggml_type t) {
  std::vector<float> row(4096);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : row) v = dist(rng);
  std::vector<uint8_t> out(*tandem::row_bytes(t, row.size()));
  for (auto _ : state) {
    tandem::quantize_row(t, row.data(), out.data(), static_cast<int64_t>(row.size()));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(row.size()));
}

const ggml_type k_types[] = {ggml_type::f32,  ggml_type::f16,  ggml_type::bf16, ggml_type::q8_0,
                             ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1,
                             ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k};

int register_all() {
  for (ggml_type t : k_types) {
    const std::string name(tandem::type_name(t));
    benchmark::RegisterBenchmark(("vec_dot/" + name + "/1MiB").c_str(), bm_vec_dot, t, uint64_t{1} << 20);
  }
  for (ggml_type t : k_types) {
    const std::string name(tandem::type_name(t));
    benchmark::RegisterBenchmark(("vec_dot/" + name + "/256MiB").c_str(), bm_vec_dot, t, uint64_t{256} << 20);
  }
  for (ggml_type t : k_types) {
    benchmark::RegisterBenchmark(("dequantize/" + std::string(tandem::type_name(t))).c_str(), bm_dequantize,
                                 t);
  }
  for (ggml_type t : k_types) {
    benchmark::RegisterBenchmark(("quantize/" + std::string(tandem::type_name(t))).c_str(), bm_quantize, t);
  }
  return 0;
}

const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
