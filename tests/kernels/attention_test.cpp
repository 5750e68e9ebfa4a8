// KV cache kernels on a Q8_0 (and f16) cache against the CPU reference on random inputs: the
// stored bytes equal quantize_kv_row's, paged attention matches attend_head. Skips without a CUDA
// device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "kernels/attention.h"
#include "quant/quant.h"
#include "kernel_test_util.h"

namespace tandem {
namespace {

using test::dev;
using test::have_gpu;
using test::randoms;

// K/V-like rows that exercise the Q8_0 scale search: uniform blocks, heavy-tailed blocks (one
// outlier, where clipping candidates can win), tiny and huge magnitudes, repeated extremes (ties
// in the largest-magnitude scan), constant blocks and one all-zero block.
std::vector<float> kv_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> v(n);
  for (size_t b = 0; b * 32 < n; ++b) {
    float* x = v.data() + b * 32;
    const int kind = int(rng() % 8);
    for (int i = 0; i < 32; ++i) x[i] = kind == 0 ? u(rng) : g(rng);
    if (kind == 2) x[rng() % 32] *= 12.f;                      // outlier
    if (kind == 3) for (int i = 0; i < 32; ++i) x[i] *= 1e-4f;  // small
    if (kind == 4) for (int i = 0; i < 32; ++i) x[i] *= 300.f;  // large
    if (kind == 5) x[3] = 2.5f, x[17] = -2.5f, x[29] = 2.5f;    // tied extremes
    if (kind == 6) for (int i = 0; i < 32; ++i) x[i] = 0.75f;   // constant
  }
  if (n >= 64) std::fill(v.begin() + 32, v.begin() + 64, 0.f);  // one all-zero block
  return v;
}

// Rows quantized on the GPU into shuffled slots are quantize_kv_row's bytes exactly (Q8_0: the same
// scale from the largest magnitude, first on ties, same rounding); f16 likewise. 150 rows of 1024 are 9600 blocks (the thread-per-
// block kernel), rows of 64 and 512 take the warp-per-block one.
TEST(kv_store, bytes_equal_cpu_quantize_kv_row) {
  REQUIRE_GPU();
  const int n_tok = 150, n_slots = 400;
  for (int row_elems : {1024, 64, 256 * 2}) {
    for (ggml_type t : {ggml_type::q8_0, ggml_type::f16}) {
      const size_t rb = *row_bytes(t, row_elems);
      const auto k = kv_values(size_t(n_tok) * row_elems, 21 + row_elems), v = kv_values(size_t(n_tok) * row_elems, 5);
      std::vector<int32_t> slots(n_slots);
      std::iota(slots.begin(), slots.end(), 0);
      std::shuffle(slots.begin(), slots.end(), std::mt19937(3));
      slots.resize(n_tok);
      dev<float> dk(k), dv(v);
      dev<int32_t> ds(slots);
      dev<uint8_t> kc(size_t(n_slots) * rb), vc(size_t(n_slots) * rb);
      ASSERT_EQ(launch_store_kv(dk.p, dv.p, kc.p, vc.p, t, ds.p, n_tok, row_elems, nullptr), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto gk = kc.host(), gv = vc.host();
      std::vector<uint8_t> ref(rb);
      int bad = 0;
      for (int i = 0; i < n_tok; ++i) {
        for (int side = 0; side < 2; ++side) {
          quantize_kv_row(t, (side ? v : k).data() + size_t(i) * row_elems, ref.data(), row_elems);
          const uint8_t* got = (side ? gv : gk).data() + size_t(slots[i]) * rb;
          if (std::memcmp(got, ref.data(), rb) != 0 && ++bad <= 3)
            ADD_FAILURE() << type_name(t) << " row_elems " << row_elems << " token " << i << (side ? " V" : " K")
                          << " differs from quantize_kv_row";
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

TEST(kv_store, rejects_bad_sizes) {
  REQUIRE_GPU();
  dev<float> x(64);
  dev<int32_t> s(std::vector<int32_t>{0});
  dev<uint8_t> c(256);
  EXPECT_EQ(launch_store_kv(x.p, x.p, c.p, c.p, ggml_type::q8_0, s.p, 1, 48, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_store_kv(x.p, x.p, c.p, c.p, ggml_type::q4_0, s.p, 1, 64, nullptr), cudaErrorInvalidValue);
  cudaGetLastError();
}

struct paged_cache {
  int D, Hq, Hkv, bs, n_blocks;
  std::vector<int32_t> table;
  std::vector<uint8_t> k, v;  // [slot][kv head] rows of row_bytes(type, D)
  size_t rb;
};

paged_cache make_cache(ggml_type t, int D, uint32_t seed, int Hq = 8, int Hkv = 2) {
  paged_cache c{D, Hq, Hkv, 16, 24, {}, {}, {}, *row_bytes(t, D)};
  c.table.resize(c.n_blocks);
  std::iota(c.table.begin(), c.table.end(), 0);
  std::shuffle(c.table.begin(), c.table.end(), std::mt19937(seed));
  const size_t rows = size_t(c.n_blocks) * c.bs * c.Hkv;
  const auto kf = kv_values(rows * D, seed + 1), vf = kv_values(rows * D, seed + 2);
  c.k.resize(rows * c.rb);
  c.v.resize(rows * c.rb);
  for (size_t r = 0; r < rows; ++r) {
    quantize_kv_row(t, kf.data() + r * D, c.k.data() + r * c.rb, D);
    quantize_kv_row(t, vf.data() + r * D, c.v.data() + r * c.rb, D);
  }
  return c;
}

// The split rule of the decode kernel, on the host: short caches keep the rule decode was tuned
// on (64 keys a split, about 2048 blocks, at most 32 splits), and up to 256 keys take splits of
// down to 32 keys until there are about 256 blocks; deep ones are cut into runs of 256 keys up to
// k_paged_max_splits and k_paged_split_slots partials, and the workspace bounds both.
TEST(paged_attention, split_count_scales_with_depth) {
  const auto old_rule = [](int64_t pairs, int64_t kv) {
    const int64_t fill = kv <= 256 ? std::min<int64_t>((kv + 31) / 32, 256 / pairs) : 0;
    return pairs >= 1024 ? int64_t{1}
                         : std::max<int64_t>(1, std::min<int64_t>({std::max((kv + 63) / 64, fill), 2048 / pairs + 1, 32}));
  };
  // A decode step's bucket of 256 keys: one sequence of 32 heads takes 8 splits of 32 keys (4 of
  // 64 before), four sequences keep 4; from 512 keys on nothing changed.
  EXPECT_EQ(paged_attention_splits(1, 32, 128, 256, paged_attention_step_work_floats(1, 32, 128)), 8);
  EXPECT_EQ(paged_attention_splits(4, 32, 128, 256, paged_attention_step_work_floats(4, 32, 128)), 4);
  EXPECT_EQ(paged_attention_splits(1, 32, 128, 512, paged_attention_step_work_floats(1, 32, 128)), 8);
  EXPECT_EQ(paged_attention_splits(1, 32, 128, 1280, paged_attention_step_work_floats(1, 32, 128)), 20);
  // 16 heads (the 35B shape's attention): 8 splits of 32 at 256 keys, and 512 keys as before.
  EXPECT_EQ(paged_attention_splits(1, 16, 256, 256, paged_attention_step_work_floats(1, 16, 256)), 8);
  EXPECT_EQ(paged_attention_splits(1, 16, 256, 512, paged_attention_step_work_floats(1, 16, 256)), 8);
  const int D = 128;
  for (int n_head : {8, 24, 32, 64})
    for (int n_tok : {1, 2, 4, 16, 40})
      for (int kv : {1, 63, 64, 65, 300, 2048, 4096, 8192}) {
        const size_t work = paged_attention_step_work_floats(n_tok, n_head, D);
        EXPECT_EQ(paged_attention_splits(n_tok, n_head, D, kv, work), old_rule(int64_t(n_tok) * n_head, kv))
            << n_tok << " x " << n_head << " heads, " << kv << " keys";
      }
  const size_t step8 = paged_attention_step_work_floats(1, 8, D);
  EXPECT_EQ(step8, paged_attention_work_floats(1, 8, D, k_paged_max_splits));
  EXPECT_EQ(paged_attention_splits(1, 8, D, 8448, step8), 33);
  EXPECT_EQ(paged_attention_splits(1, 8, D, 20224, step8), 79);
  EXPECT_EQ(paged_attention_splits(1, 8, D, 65536, step8), k_paged_max_splits);
  EXPECT_EQ(paged_attention_splits(1, 8, D, 1 << 20, step8), k_paged_max_splits);
  // Many pairs: the partial slots cap the splits; 1024 pairs or more take none.
  EXPECT_EQ(paged_attention_splits(8, 64, D, 65536, paged_attention_step_work_floats(8, 64, D)),
            k_paged_split_slots / 512);
  EXPECT_EQ(paged_attention_splits(16, 64, D, 65536, paged_attention_step_work_floats(16, 64, D)), 1);
  EXPECT_EQ(paged_attention_step_work_floats(64, 64, D), paged_attention_work_floats(1, k_paged_split_slots, D, 1));
  // The workspace bounds the splits: the 32-split one of before, none, or one split's worth.
  EXPECT_EQ(paged_attention_splits(1, 8, D, 20224, paged_attention_work_floats(1, 8, D, 32)), 32);
  EXPECT_EQ(paged_attention_splits(1, 8, D, 20224, 0), 1);
  EXPECT_EQ(paged_attention_splits(1, 8, D, 20224, paged_attention_work_floats(1, 8, D, 1)), 1);
}

// A cache of n_kv keys for one sequence (block table shuffled), 8 query heads over 2 KV heads.
paged_cache make_deep_cache(ggml_type t, int D, int n_kv, uint32_t seed) {
  const int bs = 16, n_blocks = (n_kv + bs - 1) / bs;
  paged_cache c{D, 8, 2, bs, n_blocks, {}, {}, {}, *row_bytes(t, D)};
  c.table.resize(n_blocks);
  std::iota(c.table.begin(), c.table.end(), 0);
  std::shuffle(c.table.begin(), c.table.end(), std::mt19937(seed));
  const size_t rows = size_t(n_blocks) * bs * c.Hkv;
  const auto kf = kv_values(rows * D, seed + 1), vf = kv_values(rows * D, seed + 2);
  c.k.resize(rows * c.rb);
  c.v.resize(rows * c.rb);
  for (size_t r = 0; r < rows; ++r) {
    quantize_kv_row(t, kf.data() + r * D, c.k.data() + r * c.rb, D);
    quantize_kv_row(t, vf.data() + r * D, c.v.data() + r * c.rb, D);
  }
  return c;
}

// Decode at depth: 20000 keys split into runs of 256 (79 splits, past the old cap of 32), and the
// same with a 32-split workspace, against attend_head, f16 and Q8_0 caches, head_dim 128 and 256,
// with one block per query head, grouped blocks and tensor-core blocks (f16; Q8_0 falls back).
// The tensor-core blocks hold q and p as fp16 hi + lo pairs, so they meet the same bound.
// Tokens at 20000, 15001, 8300 and 64 keys (and one skipped) take 79, 59, 33 and 1 splits of the
// launch's grid. attend_head sums 20000 floats in order, so 5e-4 (relative to max(1, |ref|)).
TEST(paged_attention, deep_cache_splits_match_attend_head) {
  REQUIRE_GPU();
  const int n_kv = 20000, max_kv = 20224;  // max_kv rounded up as the backend's 256-key buckets
  const std::vector<int32_t> pos = {n_kv - 1, 15000, 8299, 63, -1};
  const int T = int(pos.size());
  for (ggml_type type : {ggml_type::f16, ggml_type::q8_0}) {
    for (int D : {128, 256}) {
      const auto c = make_deep_cache(type, D, max_kv, 90 + D);
      std::mt19937 rng(D);
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      std::vector<float> q(size_t(T) * c.Hq * D);
      for (auto& x : q) x = u(rng) * 0.01f;
      // The CPU reference per (token, head).
      std::vector<float> ref(q.size(), 0.f), scores(n_kv), tmp(D);
      std::vector<const uint8_t*> kr, vr;
      const float scale = 1.f / std::sqrt(float(D));
      for (int t = 0; t < T; ++t) {
        if (pos[t] < 0) continue;
        for (int h = 0; h < c.Hq; ++h) {
          kr.clear(), vr.clear();
          for (int j = 0; j <= pos[t]; ++j) {
            const size_t row = (size_t(c.table[j / c.bs]) * c.bs + j % c.bs) * c.Hkv + h / (c.Hq / c.Hkv);
            kr.push_back(c.k.data() + row * c.rb), vr.push_back(c.v.data() + row * c.rb);
          }
          const size_t o = (size_t(t) * c.Hq + h) * D;
          attend_head(q.data() + o, kr.data(), vr.data(), type, pos[t] + 1, D, scale, scores.data(), tmp.data(),
                      ref.data() + o);
        }
      }
      dev<uint8_t> dk(c.k), dv(c.v);
      dev<float> dq(q), dout(q.size());
      dev<int32_t> dtab(c.table), dtt(std::vector<int32_t>(T, 0)), dpos(pos);
      paged_attention_args a;
      a.q = dq.p, a.k_cache = dk.p, a.v_cache = dv.p, a.cache_type = type, a.out = dout.p;
      a.block_tables = dtab.p, a.tok_table = dtt.p, a.tok_pos = dpos.p;
      a.n_tok = T, a.n_head = c.Hq, a.n_head_kv = c.Hkv, a.head_dim = D, a.block_size = c.bs;
      a.max_blocks = c.n_blocks, a.max_kv = max_kv, a.scale = scale;
      for (int run = 0; run < 6; ++run) {
        const int splits = run & 1 ? 32 : 79;
        a.grouped = run >> 1 == 1;  // one block per query head, grouped blocks, then tensor-core ones
        a.deep = run >> 1 == 2;
        dev<float> work(splits == 32 ? paged_attention_work_floats(T, c.Hq, D, 32)
                                     : paged_attention_step_work_floats(T, c.Hq, D),
                        0);  // counters start at 0
        ASSERT_EQ(paged_attention_splits(T, c.Hq, D, max_kv, work.n), splits);
        // Twice: the first launch must leave the arrival counters zero for the second.
        for (int rep = 0; rep < 2; ++rep) {
          ASSERT_EQ(launch_paged_attention(a, work.p, work.n, nullptr), cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          const auto got = dout.host();
          double worst = 0;
          for (int t = 0; t < T; ++t) {
            if (pos[t] < 0) continue;
            for (size_t i = size_t(t) * c.Hq * D; i < size_t(t + 1) * c.Hq * D; ++i)
              worst = std::max(worst, double(std::fabs(got[i] - ref[i])) / std::max(1.f, std::fabs(ref[i])));
          }
          std::printf("%s paged attention D %d, %d keys, %d splits, grouped %d, tensor-core %d, launch %d: worst "
                      "relative error %.3g\n",
                      std::string(type_name(type)).c_str(), D, n_kv, splits, a.grouped, a.deep, rep, worst);
          EXPECT_LE(worst, 5e-4) << type_name(type) << " D " << D << " splits " << splits << " tensor-core " << a.deep;
        }
      }
    }
  }
}

// Paged attention over a Q8_0 cache (shuffled block table, GQA, with and without splits, and asking
// for the tensor-core kernel, which has no Q8_0 form: the launcher falls back) vs attend_head on
// the same blocks.
// Both dequantize to the same float values; only the summation order and exp differ: 5e-5
// absolute on outputs of size ~1 (some rows reach ~300).
TEST(paged_attention, q8_0_cache_matches_attend_head) {
  REQUIRE_GPU();
  for (int D : {32, 64, 128, 256}) {
    const auto c = make_cache(ggml_type::q8_0, D, 7 + D);
    const std::vector<int32_t> pos = {0, 1, 37, 299, -1, 150, 383};
    const int T = int(pos.size()), n_kv_max = 384;
    std::mt19937 rng(D);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> q(size_t(T) * c.Hq * D);
    for (auto& x : q) x = u(rng) * 0.01f;  // scores of order 1 with the large (x300) cache rows
    dev<uint8_t> dk(c.k), dv(c.v);
    dev<float> dq(q), dout(size_t(T) * c.Hq * D), work(paged_attention_work_floats(T, c.Hq, D, 32), 0);  // counters start at 0
    dev<int32_t> dtab(c.table), dtt(std::vector<int32_t>(T, 0)), dpos(pos);
    paged_attention_args a;
    a.q = dq.p, a.k_cache = dk.p, a.v_cache = dv.p, a.cache_type = ggml_type::q8_0, a.out = dout.p;
    a.block_tables = dtab.p, a.tok_table = dtt.p, a.tok_pos = dpos.p;
    a.n_tok = T, a.n_head = c.Hq, a.n_head_kv = c.Hkv, a.head_dim = D, a.block_size = c.bs;
    a.max_blocks = c.n_blocks, a.max_kv = n_kv_max, a.scale = 1.f / std::sqrt(float(D));
    for (int mode = 0; mode < 4; ++mode) {
      const bool split = mode & 1;
      a.deep = mode >> 1;
      ASSERT_EQ(launch_paged_attention(a, split ? work.p : nullptr, split ? work.n : 0, nullptr), cudaSuccess);
      const auto got = dout.host();
      std::vector<const uint8_t*> kr, vr;
      std::vector<float> scores(n_kv_max), tmp(D), ref(D);
      double worst = 0;
      for (int t = 0; t < T; ++t) {
        if (pos[t] < 0) continue;
        for (int h = 0; h < c.Hq; ++h) {
          kr.clear(), vr.clear();
          for (int j = 0; j <= pos[t]; ++j) {
            const size_t row = (size_t(c.table[j / c.bs]) * c.bs + j % c.bs) * c.Hkv + h / (c.Hq / c.Hkv);
            kr.push_back(c.k.data() + row * c.rb);
            vr.push_back(c.v.data() + row * c.rb);
          }
          attend_head(q.data() + (size_t(t) * c.Hq + h) * D, kr.data(), vr.data(), ggml_type::q8_0, pos[t] + 1,
                      D, a.scale, scores.data(), tmp.data(), ref.data());
          for (int d = 0; d < D; ++d) {
            const float g = got[(size_t(t) * c.Hq + h) * D + d];
            worst = std::max(worst, double(std::fabs(g - ref[d])) / std::max(1.f, std::fabs(ref[d])));
          }
        }
      }
      std::printf("q8_0 paged attention D %d split %d tensor-core %d: worst relative error %.3g\n", D, int(split),
                  a.deep, worst);
      EXPECT_LE(worst, 5e-5) << "D " << D << " split " << split << " tensor-core " << a.deep;
    }
  }
}

// attend_head per (token, query head) of a cache: the CPU reference of launch_paged_attention.
std::vector<float> reference_attention(const paged_cache& c, ggml_type t, const std::vector<float>& q,
                                       const std::vector<int32_t>& pos, float scale) {
  const int D = c.D, T = int(pos.size());
  std::vector<float> ref(q.size(), 0.f), scores(size_t(c.n_blocks) * c.bs), tmp(D);
  std::vector<const uint8_t*> kr, vr;
  for (int i = 0; i < T; ++i) {
    if (pos[i] < 0) continue;
    for (int h = 0; h < c.Hq; ++h) {
      kr.clear(), vr.clear();
      for (int j = 0; j <= pos[i]; ++j) {
        const size_t row = (size_t(c.table[j / c.bs]) * c.bs + j % c.bs) * c.Hkv + h / (c.Hq / c.Hkv);
        kr.push_back(c.k.data() + row * c.rb), vr.push_back(c.v.data() + row * c.rb);
      }
      const size_t o = (size_t(i) * c.Hq + h) * D;
      attend_head(q.data() + o, kr.data(), vr.data(), t, pos[i] + 1, D, scale, scores.data(), tmp.data(),
                  ref.data() + o);
    }
  }
  return ref;
}

// GQA ratios 1 to 16, with and without splits, one block per query head, grouped (up to four
// query heads of a KV head a block: ratio 6 is two blocks of three, 8 two of four, 2 one block
// with two idle head slots) and tensor-core (f16: all heads of a KV head up to 16 a block, 8 at
// head size 256, where 16 is two blocks of eight; f32 and Q8_0 fall back), f16, f32 and Q8_0,
// against attend_head; 1, 38, 151 and 300 keys end mid-tile.
// The cache's x300 rows make scores reach ~100, where one rounding of a score (1e-5 of it) moves
// its softmax weight by as much, and the lanes sum in another order than attend_head: 5e-4
// relative, as deep_cache_splits_match_attend_head.
TEST(paged_attention, gqa_ratios_match_attend_head) {
  REQUIRE_GPU();
  const std::vector<std::pair<int, int>> heads = {{4, 4},  {8, 4}, {12, 4}, {12, 2},
                                                   {16, 2}, {6, 1}, {24, 4}, {32, 2}};
  const std::vector<int32_t> pos = {0, 37, 383, -1, 150, 299};
  const int T = int(pos.size()), max_kv = 384;
  for (auto [Hq, Hkv] : heads) {
    for (int D : {64, 128, 256}) {
      for (ggml_type type : {ggml_type::f16, ggml_type::f32, ggml_type::q8_0}) {
        const auto c = make_cache(type, D, 11 + D + Hq, Hq, Hkv);
        const auto q = randoms(size_t(T) * Hq * D, uint32_t(Hq * D), -0.01f, 0.01f);
        const float scale = 1.f / std::sqrt(float(D));
        const auto ref = reference_attention(c, type, q, pos, scale);
        dev<uint8_t> dk(c.k), dv(c.v);
        dev<float> dq(q), dout(q.size()), work(paged_attention_step_work_floats(T, Hq, D), 0);
        dev<int32_t> dtab(c.table), dtt(std::vector<int32_t>(T, 0)), dpos(pos);
        paged_attention_args a;
        a.q = dq.p, a.k_cache = dk.p, a.v_cache = dv.p, a.cache_type = type, a.out = dout.p;
        a.block_tables = dtab.p, a.tok_table = dtt.p, a.tok_pos = dpos.p;
        a.n_tok = T, a.n_head = Hq, a.n_head_kv = Hkv, a.head_dim = D, a.block_size = c.bs;
        a.max_blocks = c.n_blocks, a.max_kv = max_kv, a.scale = scale;
        for (int mode = 0; mode < 6; ++mode) {
          const bool split = mode & 1;
          a.grouped = mode >> 1 == 1;
          a.deep = mode >> 1 == 2;
          ASSERT_EQ(cudaMemset(dout.p, 0, dout.n * sizeof(float)), cudaSuccess);
          ASSERT_EQ(launch_paged_attention(a, split ? work.p : nullptr, split ? work.n : 0, nullptr), cudaSuccess);
          const auto got = dout.host();
          double worst = 0;
          for (int i = 0; i < T; ++i) {
            if (pos[i] < 0) continue;
            for (size_t e = size_t(i) * Hq * D; e < size_t(i + 1) * Hq * D; ++e)
              worst = std::max(worst, double(std::fabs(got[e] - ref[e])) / std::max(1.f, std::fabs(ref[e])));
          }
          EXPECT_LE(worst, 5e-4) << type_name(type) << " " << Hq << "/" << Hkv << " heads, D " << D << " split "
                                 << split << " grouped " << a.grouped << " tensor-core " << a.deep;
        }
      }
    }
  }
}

// A decode step's shortest caches (its 256-key bucket), where few (token, head) pairs take the
// fill's splits of 32 keys: one token of 32 heads over 4 KV heads (8 splits), of 16 over 2 at
// head size 256 (8), and two tokens of 32 heads (4 splits of 64), f16 and Q8_0, against
// attend_head. Tolerance as gqa_ratios_match_attend_head.
TEST(paged_attention, short_cache_fill_splits_match_attend_head) {
  REQUIRE_GPU();
  struct shape {
    int Hq, Hkv, D, splits;
    std::vector<int32_t> pos;
  };
  const int max_kv = 256;
  for (const shape& sh : {shape{32, 4, 128, 8, {200}}, shape{16, 2, 256, 8, {255}}, shape{32, 4, 128, 4, {0, 255}},
                          shape{32, 4, 128, 8, {31}}})
    for (ggml_type type : {ggml_type::f16, ggml_type::q8_0}) {
      const int T = int(sh.pos.size());
      const auto c = make_cache(type, sh.D, 5 + sh.D + sh.Hq, sh.Hq, sh.Hkv);
      const auto q = randoms(size_t(T) * sh.Hq * sh.D, uint32_t(sh.Hq + sh.D), -0.01f, 0.01f);
      const float scale = 1.f / std::sqrt(float(sh.D));
      const auto ref = reference_attention(c, type, q, sh.pos, scale);
      dev<uint8_t> dk(c.k), dv(c.v);
      dev<float> dq(q), dout(q.size()), work(paged_attention_step_work_floats(T, sh.Hq, sh.D), 0);
      dev<int32_t> dtab(c.table), dtt(std::vector<int32_t>(T, 0)), dpos(sh.pos);
      ASSERT_EQ(paged_attention_splits(T, sh.Hq, sh.D, max_kv, work.n), sh.splits);
      paged_attention_args a;
      a.q = dq.p, a.k_cache = dk.p, a.v_cache = dv.p, a.cache_type = type, a.out = dout.p;
      a.block_tables = dtab.p, a.tok_table = dtt.p, a.tok_pos = dpos.p;
      a.n_tok = T, a.n_head = sh.Hq, a.n_head_kv = sh.Hkv, a.head_dim = sh.D, a.block_size = c.bs;
      a.max_blocks = c.n_blocks, a.max_kv = max_kv, a.scale = scale;
      ASSERT_EQ(launch_paged_attention(a, work.p, work.n, nullptr), cudaSuccess);
      const auto got = dout.host();
      double worst = 0;
      for (size_t e = 0; e < got.size(); ++e)
        worst = std::max(worst, double(std::fabs(got[e] - ref[e])) / std::max(1.f, std::fabs(ref[e])));
      EXPECT_LE(worst, 5e-4) << type_name(type) << " " << sh.Hq << "/" << sh.Hkv << " heads, D " << sh.D << ", "
                             << T << " tokens";
    }
}

// ---- Benchmark ------------------------------------------------------------------------------

// Decode attention at depth, one token: the Qwen3-8B shape (32 query / 8 KV heads, head size 128)
// and Qwen3.5-27B's attention layers (24 / 4, head size 256), f16 caches of 16,384 and 65,536
// keys behind a shuffled block table, four layers' caches in turn (so K/V come from HBM),
// replayed from a CUDA graph: us a launch and GB/s of K/V bytes, grouped CUDA-core blocks
// against tensor-core ones (docs/PERFORMANCE.md, "Long prompts"). Asserts only that the
// launches succeed.
TEST(big, decode_attention_at_depth) {
  REQUIRE_GPU();
  struct shape {
    int D, Hq, Hkv;
  };
  for (const shape sh : {shape{128, 32, 8}, shape{256, 24, 4}}) {
    for (const int n_kv : {16384, 65536}) {
      const int bs = 16, n_blocks = n_kv / bs, layers = 4;
      const size_t halves = size_t(n_kv) * sh.Hkv * sh.D;
      std::vector<uint16_t> h(halves);
      uint32_t x = 12345u;
      for (auto& v : h) x = x * 1664525u + 1013904223u, v = uint16_t(0x3000u | (x >> 22) | ((x >> 8) & 0x8000u));
      std::vector<std::unique_ptr<dev<uint16_t>>> k, v;
      for (int l = 0; l < layers; ++l) k.push_back(std::make_unique<dev<uint16_t>>(h)), v.push_back(std::make_unique<dev<uint16_t>>(h));
      std::vector<int32_t> table(n_blocks);
      std::iota(table.begin(), table.end(), 0);
      std::shuffle(table.begin(), table.end(), std::mt19937(7));
      dev<int32_t> dtab(table), dtt(std::vector<int32_t>{0}), dpos(std::vector<int32_t>{n_kv - 1});
      dev<float> dq(randoms(size_t(sh.Hq) * sh.D, 3, -0.5f, 0.5f)), dout(size_t(sh.Hq) * sh.D);
      dev<float> work(paged_attention_step_work_floats(1, sh.Hq, sh.D), 0);
      paged_attention_args a;
      a.q = dq.p, a.cache_type = ggml_type::f16, a.out = dout.p;
      a.block_tables = dtab.p, a.tok_table = dtt.p, a.tok_pos = dpos.p;
      a.n_tok = 1, a.n_head = sh.Hq, a.n_head_kv = sh.Hkv, a.head_dim = sh.D, a.block_size = bs;
      a.max_blocks = n_blocks, a.max_kv = n_kv, a.scale = 1.f / std::sqrt(float(sh.D));
      double us[2];
      for (int deep = 0; deep < 2; ++deep) {
        a.deep = deep;
        us[deep] = test::time_us([&](int i, cudaStream_t s) {
          a.k_cache = k[i % layers]->p, a.v_cache = v[i % layers]->p;
          launch_paged_attention(a, work.p, work.n, s);
        }, true);
        ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      }
      const double gb = 2.0 * halves * 2 / 1e3;  // K and V bytes, per us -> GB/s
      std::printf("decode attention D %d, %d / %d heads, %d keys, %d splits: grouped %.1f us (%.0f GB/s), "
                  "tensor-core %.1f us (%.0f GB/s)\n",
                  sh.D, sh.Hq, sh.Hkv, n_kv, paged_attention_splits(1, sh.Hq, sh.D, n_kv, work.n), us[0], gb / us[0],
                  us[1], gb / us[1]);
    }
  }
}

}  // namespace
}  // namespace tandem
