// Flash attention (prefill runs) over f16, f32 and Q8_0 paged caches against the CPU's attend_head
// on random inputs, every case through each kind of block the device runs (WMMA; mma.sync of 64
// and 128 rows on sm_80+): head sizes 32-256, GQA 1-8, runs at position 0 and past it, lengths
// around the row and key tiles, several runs in one launch over shuffled block tables. Skips
// without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "kernels/arch.h"
#include "kernels/flash_attention.h"
#include "quant/quant.h"
#include "kernel_test_util.h"

namespace tandem {
namespace {

using test::dev;
using test::randoms;

struct run_case {
  int n, pos0;
};

struct flash_case {
  ggml_type type;
  int D, n_head_kv, grp;
  std::vector<run_case> runs;
  int block_size = 16;
};

// The paged cache of a case: each run is a sequence with its own table row, its blocks drawn
// from one shuffled pool; every slot holds random K and V rows (never zero).
struct paged_setup {
  int max_blocks = 0;
  size_t rb = 0;
  std::vector<int32_t> tables;
  std::vector<uint8_t> k, v;
};

paged_setup make_setup(const flash_case& c, uint32_t seed) {
  paged_setup s;
  s.rb = *row_bytes(c.type, c.D);
  int total = 3;  // spare blocks no run uses
  for (const auto& r : c.runs) {
    const int blocks = (r.pos0 + r.n + c.block_size - 1) / c.block_size;
    s.max_blocks = std::max(s.max_blocks, blocks);
    total += blocks;
  }
  std::vector<int32_t> pool(total);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
  s.tables.assign(c.runs.size() * s.max_blocks, 0);
  size_t next = 0;
  for (size_t i = 0; i < c.runs.size(); ++i)
    for (int b = 0; b * c.block_size < c.runs[i].pos0 + c.runs[i].n; ++b) s.tables[i * s.max_blocks + b] = pool[next++];
  const size_t rows = size_t(total) * c.block_size * c.n_head_kv;
  const auto kf = randoms(rows * c.D, seed + 1), vf = randoms(rows * c.D, seed + 2);
  s.k.resize(rows * s.rb);
  s.v.resize(rows * s.rb);
  for (size_t r = 0; r < rows; ++r) {
    quantize_kv_row(c.type, kf.data() + r * c.D, s.k.data() + r * s.rb, c.D);
    quantize_kv_row(c.type, vf.data() + r * c.D, s.v.data() + r * s.rb, c.D);
  }
  return s;
}

// Worst error of a case: |got - ref| over the largest |ref| of that (token, head) row.
struct worst_error {
  double rel = 0;
  int run = -1, token = -1, head = -1, d = -1;
  float got = 0, ref = 0;
};

// Runs the case's runs in one launch (tokens back to back, one uncovered token after each run,
// which must keep the output's poison) and compares every row with attend_head.
worst_error run_case_and_compare(const flash_case& c, flash_kernel kind, uint32_t seed, int* untouched_bad) {
  const int D = c.D, Hkv = c.n_head_kv, Hq = Hkv * c.grp;
  const paged_setup s = make_setup(c, seed);
  std::vector<flash_run> runs;
  int n_tok = 0;
  for (size_t i = 0; i < c.runs.size(); ++i) {
    runs.push_back({n_tok, c.runs[i].n, int(i), c.runs[i].pos0});
    n_tok += c.runs[i].n + 1;
  }
  const auto q = randoms(size_t(n_tok) * Hq * D, seed + 3, -2.f, 2.f);
  dev<uint8_t> dk(s.k), dv(s.v);
  dev<int32_t> dtab(s.tables);
  dev<float> dq(q), dout(size_t(n_tok) * Hq * D);
  flash_attention_args a;
  a.q = dq.p, a.k_cache = dk.p, a.v_cache = dv.p, a.cache_type = c.type, a.out = dout.p;
  a.block_tables = dtab.p, a.runs = runs.data(), a.n_runs = int(runs.size());
  a.n_tok = n_tok, a.n_head = Hq, a.n_head_kv = Hkv, a.head_dim = D;
  a.block_size = c.block_size, a.max_blocks = s.max_blocks, a.scale = 1.f / std::sqrt(float(D));
  a.kernel = kind;
  EXPECT_EQ(launch_flash_attention(a, nullptr), cudaSuccess);
  const auto got = dout.host();

  worst_error w;
  std::vector<const uint8_t*> kr, vr;
  std::vector<float> scores, tmp(D), ref(D);
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const flash_run& r = runs[ri];
    scores.resize(size_t(r.pos0 + r.n));
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      kr.clear(), vr.clear();
      for (int j = 0; j < r.pos0 + r.n; ++j) {
        const size_t slot = size_t(s.tables[ri * s.max_blocks + j / c.block_size]) * c.block_size + j % c.block_size;
        kr.push_back(s.k.data() + (slot * Hkv + kvh) * s.rb);
        vr.push_back(s.v.data() + (slot * Hkv + kvh) * s.rb);
      }
      for (int i = 0; i < r.n; ++i)
        for (int h = kvh * c.grp; h < (kvh + 1) * c.grp; ++h) {
          const size_t row = (size_t(r.t0 + i) * Hq + h) * D;
          attend_head(q.data() + row, kr.data(), vr.data(), c.type, r.pos0 + i + 1, D, a.scale, scores.data(),
                      tmp.data(), ref.data());
          float scale = 0.f;
          for (int d = 0; d < D; ++d) scale = std::max(scale, std::fabs(ref[d]));
          for (int d = 0; d < D; ++d) {
            const double e = std::fabs(double(got[row + d]) - ref[d]) / scale;
            if (!(e <= w.rel))  // NaN counts as the worst
              w = {std::isnan(e) ? INFINITY : e, int(ri), i, h, d, got[row + d], ref[d]};
          }
        }
    }
  }
  // The token after each run belongs to no run: the launch must not write it.
  *untouched_bad = 0;
  for (const auto& r : runs) {
    const size_t row = size_t(r.t0 + r.n) * Hq * D;
    for (size_t e = 0; e < size_t(Hq) * D; ++e) {
      uint32_t bits;
      std::memcpy(&bits, &got[row + e], 4);
      *untouched_bad += bits != 0x7f7f7f7fu;
    }
  }
  return w;
}

// fp16 q, K and V (P too) against the CPU's float arithmetic: ~1e-3 of a row's scale at worst.
constexpr double k_tolerance = 2e-3;

const char* kind_name(flash_kernel k) {
  return k == flash_kernel::wmma ? "wmma" : k == flash_kernel::mma64 ? "mma64" : "mma128";
}

// The kinds of block this device runs for head size D.
std::vector<flash_kernel> kinds_for(int D) {
  std::vector<flash_kernel> kinds{flash_kernel::wmma};
  if (kernel_arch() >= 80) {
    kinds.push_back(flash_kernel::mma64);
    if (D <= 128) kinds.push_back(flash_kernel::mma128);
  }
  return kinds;
}

void check(const flash_case& c, uint32_t seed) {
  for (flash_kernel kind : kinds_for(c.D)) {
    int untouched_bad = 0;
    const worst_error w = run_case_and_compare(c, kind, seed, &untouched_bad);
    std::printf("flash attention %s %s D %d kv heads %d grp %d bs %d (%zu runs): worst %.3g\n", kind_name(kind),
                std::string(type_name(c.type)).c_str(), c.D, c.n_head_kv, c.grp, c.block_size, c.runs.size(), w.rel);
    EXPECT_LE(w.rel, k_tolerance) << kind_name(kind) << " " << type_name(c.type) << " D " << c.D << " grp " << c.grp
                                  << ": worst at run " << w.run << " (n " << c.runs[std::max(w.run, 0)].n
                                  << ", pos0 " << c.runs[std::max(w.run, 0)].pos0 << ") token " << w.token
                                  << " head " << w.head << " d " << w.d << ": got " << w.got << ", reference "
                                  << w.ref;
    EXPECT_EQ(untouched_bad, 0) << kind_name(kind) << ": values written outside the runs";
  }
}

// Lengths around the 64- and 128-row tiles (and the 32- and 64-key tiles), a run at position 0
// and runs that continue a sequence already in the cache, six runs in one launch.
const std::vector<run_case> k_mixed_runs = {{1, 0}, {17, 0}, {63, 5}, {64, 0}, {65, 130}, {127, 9}, {300, 0}};

TEST(flash_attention, f16_and_q8_0_match_attend_head_over_head_sizes_and_gqa) {
  REQUIRE_GPU();
  uint32_t seed = 1;
  for (ggml_type t : {ggml_type::f16, ggml_type::q8_0})
    for (int D : {64, 128, 256})
      for (int grp : {1, 2, 4, 8}) check({t, D, 2, grp, k_mixed_runs}, seed++);
}

TEST(flash_attention, f32_cache_head_size_32_and_odd_gqa) {
  REQUIRE_GPU();
  check({ggml_type::f32, 128, 2, 2, k_mixed_runs}, 101);
  check({ggml_type::f32, 64, 1, 8, k_mixed_runs}, 102);
  check({ggml_type::f32, 256, 2, 4, {{17, 0}, {65, 40}}}, 103);
  check({ggml_type::f16, 32, 2, 4, k_mixed_runs}, 104);
  check({ggml_type::q8_0, 32, 4, 1, k_mixed_runs}, 105);
  // Ratios that do not divide the 64-row tile: tiles start inside a token's group of heads.
  check({ggml_type::f16, 128, 2, 3, k_mixed_runs}, 106);
  check({ggml_type::q8_0, 64, 1, 7, k_mixed_runs}, 107);
  // Another block size: 32 slots.
  flash_case c{ggml_type::f16, 128, 2, 4, k_mixed_runs};
  c.block_size = 32;
  check(c, 108);
}

TEST(flash_attention, long_runs_and_a_chunk_past_the_start) {
  REQUIRE_GPU();
  check({ggml_type::f16, 128, 2, 4, {{1000, 0}}}, 201);
  // A 1000-token chunk of a longer prompt beside a new sequence, in one launch.
  check({ggml_type::q8_0, 64, 2, 2, {{1000, 700}, {300, 0}}}, 202);
  check({ggml_type::f16, 256, 1, 8, {{1000, 24}}}, 203);
}

// More runs than one launch takes (32): the launcher splits them.
TEST(flash_attention, many_runs_take_several_launches) {
  REQUIRE_GPU();
  std::vector<run_case> runs;
  for (int i = 0; i < 40; ++i) runs.push_back({16 + (i * 7) % 50, (i * 13) % 90});
  check({ggml_type::f16, 64, 2, 2, runs}, 301);
}

TEST(flash_attention, rejects_bad_arguments) {
  REQUIRE_GPU();
  dev<float> x(64);
  dev<int32_t> tab(std::vector<int32_t>{0});
  const flash_run run{0, 1, 0, 0};
  flash_attention_args a;
  a.q = x.p, a.k_cache = x.p, a.v_cache = x.p, a.out = x.p, a.block_tables = tab.p;
  a.runs = &run, a.n_runs = 1, a.n_tok = 1, a.n_head = 2, a.n_head_kv = 1, a.head_dim = 32;
  a.block_size = 16, a.max_blocks = 1;
  auto with = [&](auto change) {
    flash_attention_args b = a;
    change(b);
    return launch_flash_attention(b, nullptr);
  };
  EXPECT_EQ(with([](flash_attention_args& b) { b.head_dim = 96; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](flash_attention_args& b) { b.n_head = 3, b.n_head_kv = 2; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](flash_attention_args& b) { b.cache_type = ggml_type::q4_0; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](flash_attention_args& b) { b.n_tok = 0; }), cudaErrorInvalidValue);  // run past the batch
  const flash_run deep{0, 1, 0, 16};  // position 16 with one 16-slot block
  EXPECT_EQ(with([&](flash_attention_args& b) { b.runs = &deep; }), cudaErrorInvalidValue);
  EXPECT_EQ(with([](flash_attention_args& b) { b.n_runs = 0; }), cudaSuccess);  // nothing to do
  // 128-row mma.sync blocks stop at head size 128; below sm_80 there are no mma.sync blocks.
  EXPECT_EQ(with([](flash_attention_args& b) { b.head_dim = 256, b.kernel = flash_kernel::mma128; }),
            cudaErrorInvalidValue);
  if (kernel_arch() < 80) {
    EXPECT_EQ(with([](flash_attention_args& b) { b.kernel = flash_kernel::mma64; }), cudaErrorInvalidValue);
  }
  cudaGetLastError();
}

}  // namespace
}  // namespace tandem
