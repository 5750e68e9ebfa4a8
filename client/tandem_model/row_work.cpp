// Deterministic random rows (splitmix64 + Box-Muller) and a small chunked thread loop.
#include "row_work.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

namespace tandem {
namespace {

// splitmix64 (Steele, Lea, Flood 2014): a fast generator whose states from nearby seeds are
// uncorrelated after one step, which is what per-row streams need.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A uniform double in (0, 1]: never 0, so log() below is finite.
double unit(uint64_t& state) { return (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1p-53; }

}  // namespace

uint64_t tensor_seed(uint64_t seed, std::string_view tensor_name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the name
  for (unsigned char c : tensor_name) h = (h ^ c) * 0x100000001b3ull;
  uint64_t state = seed ^ h;
  return splitmix64(state);
}

void fill_normal_row(uint64_t tensor_seed, uint64_t row, float std_dev, float* out, int64_t n) {
  uint64_t state = tensor_seed ^ (row * 0xd1b54a32d192ed03ull);
  splitmix64(state);
  constexpr double two_pi = 6.283185307179586476925;
  for (int64_t i = 0; i < n; i += 2) {
    // Box-Muller gives two independent normals per pair of uniforms.
    const double r = std::sqrt(-2.0 * std::log(unit(state))) * std_dev;
    const double a = two_pi * unit(state);
    out[i] = static_cast<float>(r * std::cos(a));
    if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(a));
  }
}

void for_each_row_chunk(uint64_t total_rows, unsigned n_threads, uint64_t scratch_floats,
                        const std::function<void(uint64_t, uint64_t, float*)>& fn) {
  if (total_rows == 0) return;
  // Chunks of about 1 Mi elements keep threads busy without much hand-off cost.
  const uint64_t chunk = std::max<uint64_t>(1, (uint64_t{1} << 20) / std::max<uint64_t>(1, scratch_floats));
  const uint64_t n_chunks = (total_rows + chunk - 1) / chunk;
  const unsigned workers = static_cast<unsigned>(std::clamp<uint64_t>(n_threads, 1, n_chunks));
  std::atomic<uint64_t> next{0};
  auto work = [&] {
    std::vector<float> scratch(scratch_floats);
    for (uint64_t c; (c = next.fetch_add(1)) < n_chunks;) {
      const uint64_t first = c * chunk;
      fn(first, std::min(chunk, total_rows - first), scratch.data());
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < workers; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

unsigned default_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

}  // namespace tandem
