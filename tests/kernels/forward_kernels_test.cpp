// The forward-pass kernels (mat-vec, layer ops, paged attention) against the CPU reference
// operations on random inputs. Tolerances are stated per check; skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/cuda_check.h"
#include "kernels/layer_ops.h"
#include "kernels/matvec.h"
#include "quant/quant.h"

namespace tandem {
namespace {

bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

#define REQUIRE_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device"

std::vector<float> randoms(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A device copy of a host vector, freed on scope exit.
template <class T>
struct dev {
  T* p = nullptr;
  size_t n = 0;
  explicit dev(const std::vector<T>& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit dev(size_t count, uint8_t poison = 0x7f) : n(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, poison, n * sizeof(T)), cudaSuccess);  // unwritten outputs show up
  }
  ~dev() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

std::vector<uint8_t> quantize_matrix(ggml_type t, const std::vector<float>& w, int64_t n_in, int64_t n_out) {
  const uint64_t rb = *row_bytes(t, n_in);
  std::vector<uint8_t> q(rb * n_out);
  for (int64_t o = 0; o < n_out; ++o) quantize_row(t, w.data() + o * n_in, q.data() + o * rb, n_in);
  return q;
}

class matvec_types : public ::testing::TestWithParam<ggml_type> {};

// Against vec_dot on the same blocks: both accumulate in float32 in different orders, so the
// bound is relative to sum |w_i x_i|: 2e-5 of it (float32 rounding over 512-term sums).
TEST_P(matvec_types, matches_cpu_vec_dot) {
  REQUIRE_GPU();
  const ggml_type t = GetParam();
  const int64_t n_in = 512, n_out = 37;
  const auto w = randoms(n_in * n_out, 11);
  const auto q = quantize_matrix(t, w, n_in, n_out);
  const uint64_t rb = *row_bytes(t, n_in);
  for (int n_tok : {1, 3, 8}) {
    const auto x = randoms(n_in * n_tok, 100 + n_tok);
    dev<uint8_t> dw(q);
    dev<float> dx(x), dy(size_t(n_tok * n_out));
    ASSERT_EQ(launch_matvec(t, dw.p, n_in, n_out, dx.p, n_tok, dy.p, nullptr), cudaSuccess);
    const auto y = dy.host();
    std::vector<float> deq(n_in);
    for (int tk = 0; tk < n_tok; ++tk)
      for (int64_t o = 0; o < n_out; ++o) {
        const float* xt = x.data() + tk * n_in;
        const float ref = vec_dot(t, q.data() + o * rb, xt, n_in);
        dequantize_row(t, q.data() + o * rb, deq.data(), n_in);
        double mag = 0;
        for (int64_t i = 0; i < n_in; ++i) mag += std::fabs(double(deq[i]) * xt[i]);
        ASSERT_NEAR(y[tk * n_out + o], ref, 2e-5 * mag + 1e-6) << type_name(t) << " tok " << tk << " row " << o;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(all, matvec_types,
                         ::testing::Values(ggml_type::f32, ggml_type::f16, ggml_type::q4_0, ggml_type::q4_1,
                                           ggml_type::q5_0, ggml_type::q5_1, ggml_type::q8_0, ggml_type::q4_k,
                                           ggml_type::q5_k, ggml_type::q6_k),
                         [](const auto& info) { return std::string(type_name(info.param)); });

TEST(matvec, rejects_bad_sizes) {
  EXPECT_EQ(launch_matvec(ggml_type::q4_k, nullptr, 100, 4, nullptr, 1, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec(ggml_type::q8_0, nullptr, 64, 4, nullptr, 9, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_matvec(ggml_type::bf16, nullptr, 64, 4, nullptr, 1, nullptr, nullptr), cudaErrorInvalidValue);
}

// The staged (coalesced) path, rows 16-byte aligned: long rows with a partial last chunk
// (4864), rows split across warps (few rows), three fused outputs of different heights, and
// y += W·x. Same bound as above, against vec_dot plus the old y.
void check_fused_matvec(ggml_type t, int64_t n_in, int n_tok, bool add) {
  const int64_t heights[3] = {203, 64, 31};
  const uint64_t rb = *row_bytes(t, n_in);
  std::vector<std::vector<uint8_t>> qs;
  std::vector<std::unique_ptr<dev<uint8_t>>> dw;
  std::vector<std::unique_ptr<dev<float>>> dy;
  std::vector<std::vector<float>> y0;
  matvec_output outs[3];
  for (int j = 0; j < 3; ++j) {
    qs.push_back(quantize_matrix(t, randoms(n_in * heights[j], 21 + j), n_in, heights[j]));
    y0.push_back(randoms(size_t(n_tok * heights[j]), 31 + j));
    dw.push_back(std::make_unique<dev<uint8_t>>(qs[j]));
    dy.push_back(std::make_unique<dev<float>>(y0[j]));
    outs[j] = {dw[j]->p, heights[j], dy[j]->p};
  }
  const auto x = randoms(n_in * n_tok, 41);
  dev<float> dx(x);
  ASSERT_EQ(launch_matvec_multi(t, n_in, outs, 3, dx.p, n_tok, add, nullptr), cudaSuccess);
  std::vector<float> deq(n_in);
  for (int j = 0; j < 3; ++j) {
    const auto y = dy[j]->host();
    for (int tk = 0; tk < n_tok; ++tk)
      for (int64_t o = 0; o < heights[j]; ++o) {
        const float* xt = x.data() + tk * n_in;
        const uint8_t* row = qs[j].data() + o * rb;
        const float ref = vec_dot(t, row, xt, n_in) + (add ? y0[j][tk * heights[j] + o] : 0.f);
        dequantize_row(t, row, deq.data(), n_in);
        double mag = add ? std::fabs(y0[j][tk * heights[j] + o]) : 0.0;
        for (int64_t i = 0; i < n_in; ++i) mag += std::fabs(double(deq[i]) * xt[i]);
        ASSERT_NEAR(y[tk * heights[j] + o], ref, 2e-5 * mag + 1e-6)
            << type_name(t) << " n_in " << n_in << " out " << j << " tok " << tk << " row " << o;
      }
  }
}

TEST_P(matvec_types, fused_staged_rows) {
  REQUIRE_GPU();
  const ggml_type t = GetParam();
  for (int64_t n_in : {4864, 6144}) {
    if (n_in % int64_t(type_info(t).block_size) != 0) continue;
    check_fused_matvec(t, n_in, 1, false);
    check_fused_matvec(t, n_in, 5, true);
  }
}

// Decode mat-vec bandwidth on a 12288 x 4096 matrix (one FFN projection of an 8B model), made
// by tiling a quantized 64-row block so the bytes are realistic. Prints GB/s; asserts nothing
// about speed, only that the launches succeed.
TEST(big, matvec_bandwidth) {
  REQUIRE_GPU();
  const int64_t n_in = 4096, n_out = 12288, tile = 64;
  for (ggml_type t : {ggml_type::q8_0, ggml_type::q6_k, ggml_type::q4_k, ggml_type::q4_0, ggml_type::f16}) {
    const auto q = quantize_matrix(t, randoms(n_in * tile, 51), n_in, tile);
    std::vector<uint8_t> big(q.size() * (n_out / tile));
    for (int64_t i = 0; i < n_out / tile; ++i) std::copy(q.begin(), q.end(), big.begin() + i * q.size());
    dev<uint8_t> dw(big);
    dev<float> dx(randoms(n_in, 52));
    dev<float> dy(static_cast<size_t>(n_out));
    cudaEvent_t e0, e1;
    ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
    const int reps = 50;
    std::vector<float> ms;
    for (int r = 0; r < 5; ++r) {
      ASSERT_EQ(cudaEventRecord(e0), cudaSuccess);
      for (int i = 0; i < reps; ++i)
        ASSERT_EQ(launch_matvec(t, dw.p, n_in, n_out, dx.p, 1, dy.p, nullptr), cudaSuccess);
      ASSERT_EQ(cudaEventRecord(e1), cudaSuccess);
      ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
      float m = 0;
      cudaEventElapsedTime(&m, e0, e1);
      ms.push_back(m / reps);
    }
    std::sort(ms.begin(), ms.end());
    std::printf("matvec %-5s %lld x %lld, 1 token: %.1f us, %.0f GB/s of weights\n",
                std::string(type_name(t)).c_str(), static_cast<long long>(n_out), static_cast<long long>(n_in),
                ms[2] * 1e3, double(big.size()) / (ms[2] * 1e-3) / 1e9);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
}

// RMSNorm (relative 1e-5), RoPE of both styles (1e-5 absolute, angles in double on both),
// SwiGLU (relative 1e-5): the same float formulas as the CPU.
TEST(layer_ops, rms_norm_rope_swiglu) {
  REQUIRE_GPU();
  const int T = 5, H = 4, D = 64, n = H * D;
  const auto x = randoms(T * n, 1), w = randoms(n, 2, 0.5f, 1.5f);
  dev<float> dx(x), dw(w), dout(size_t(T * n));
  ASSERT_EQ(launch_rms_norm(dx.p, dw.p, dout.p, T, n, 1e-6f, nullptr), cudaSuccess);
  auto got = dout.host();
  std::vector<float> ref(n);
  for (int t = 0; t < T; ++t) {
    rms_norm(x.data() + t * n, w.data(), ref.data(), n, 1e-6f);
    for (int i = 0; i < n; ++i) ASSERT_NEAR(got[t * n + i], ref[i], 1e-5f * std::fabs(ref[i]) + 1e-6f);
  }
  const std::vector<int32_t> pos = {0, 7, 100, 4095, 70000};
  dev<int32_t> dpos(pos);
  for (bool neox : {false, true}) {
    dev<float> dr(x);
    ASSERT_EQ(launch_rope(dr.p, dpos.p, T, H, D, 48, 1e6f, neox, nullptr), cudaSuccess);
    got = dr.host();
    for (int t = 0; t < T; ++t) {
      std::vector<float> r(x.begin() + t * n, x.begin() + (t + 1) * n);
      rope(r.data(), H, D, 48, pos[t], 1e6f, neox ? rope_style::neox : rope_style::normal);
      for (int i = 0; i < n; ++i) ASSERT_NEAR(got[t * n + i], r[i], 1e-5f) << "neox " << neox << " t " << t;
    }
  }
  const auto g = randoms(T * n, 3, -6.f, 6.f), u = randoms(T * n, 4);
  dev<float> dg(g), du(u), ds(size_t(T * n));
  ASSERT_EQ(launch_swiglu(dg.p, du.p, ds.p, T * n, nullptr), cudaSuccess);
  got = ds.host();
  std::vector<float> sref(T * n);
  swiglu(g.data(), u.data(), sref.data(), T * n);
  for (int i = 0; i < T * n; ++i) ASSERT_NEAR(got[i], sref[i], 1e-5f * std::fabs(sref[i]) + 1e-7f);
}

// Embedding rows decode exactly as the CPU's dequantize_row (same float operations: 1e-6).
TEST(layer_ops, get_rows_and_argmax) {
  REQUIRE_GPU();
  const int64_t n = 256, rows = 9;
  const std::vector<int32_t> ids = {3, 0, 8, 3, 5};
  for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q6_k}) {
    const auto q = quantize_matrix(t, randoms(n * rows, 5), n, rows);
    const uint64_t rb = *row_bytes(t, n);
    dev<uint8_t> dq(q);
    dev<int32_t> did(ids);
    dev<float> dout(ids.size() * n);
    ASSERT_EQ(launch_get_rows(t, dq.p, rb, did.p, int(ids.size()), n, dout.p, nullptr), cudaSuccess);
    const auto got = dout.host();
    std::vector<float> ref(n);
    for (size_t i = 0; i < ids.size(); ++i) {
      dequantize_row(t, q.data() + ids[i] * rb, ref.data(), n);
      for (int64_t j = 0; j < n; ++j) ASSERT_NEAR(got[i * n + j], ref[j], 1e-6f * std::fabs(ref[j]) + 1e-7f);
    }
  }
  const int64_t V = 50000;
  auto logits = randoms(3 * V, 6);
  logits[V + 123] = 5.f, logits[V + 7] = 5.f;  // a tie: the first index wins
  dev<float> dl(logits);
  dev<int32_t> di(size_t(3));
  ASSERT_EQ(launch_argmax(dl.p, 3, V, di.p, nullptr), cudaSuccess);
  const auto got = di.host();
  for (int r = 0; r < 3; ++r) {
    const auto b = logits.begin() + r * V;
    EXPECT_EQ(got[r], std::max_element(b, b + V) - b);
  }
}

// Paged attention over an f16 cache with a shuffled block table vs attend_head: both read the
// same fp16 K/V and accumulate in float32; 2e-5 absolute on outputs of size ~1.
TEST(attention, paged_matches_attend_head) {
  REQUIRE_GPU();
  for (int D : {64, 128}) {
    const int Hq = 8, Hkv = 2, bs = 16, n_kv_max = 300, n_blocks = 24;
    std::vector<int32_t> table(n_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(7));
    const int n_slots = n_blocks * bs, row = Hkv * D;
    const auto kf = randoms(size_t(n_slots) * row, 8), vf = randoms(size_t(n_slots) * row, 9);
    std::vector<uint16_t> k16(kf.size()), v16(vf.size());
    quantize_row(ggml_type::f16, kf.data(), k16.data(), int64_t(kf.size()));
    quantize_row(ggml_type::f16, vf.data(), v16.data(), int64_t(vf.size()));
    // Tokens at positions spanning the split sizes, plus one masked out (-1).
    const std::vector<int32_t> pos = {0, 1, 37, 299, -1, 150};
    const int T = int(pos.size());
    const auto q = randoms(size_t(T) * Hq * D, 10, -2.f, 2.f);
    dev<uint16_t> dk(k16), dv(v16);
    dev<float> dq(q), dout(size_t(T) * Hq * D), work(paged_attention_work_floats(T, Hq, D, 32));
    dev<int32_t> dtab(table), dtt(std::vector<int32_t>(T, 0)), dpos(pos);
    paged_attention_args a;
    a.q = dq.p, a.k_cache = dk.p, a.v_cache = dv.p, a.cache_type = ggml_type::f16, a.out = dout.p;
    a.block_tables = dtab.p, a.tok_table = dtt.p, a.tok_pos = dpos.p;
    a.n_tok = T, a.n_head = Hq, a.n_head_kv = Hkv, a.head_dim = D, a.block_size = bs, a.max_blocks = n_blocks;
    a.max_kv = n_kv_max, a.scale = 1.f / std::sqrt(float(D));
    for (bool split : {false, true}) {
      ASSERT_EQ(launch_paged_attention(a, split ? work.p : nullptr, split ? work.n : 0, nullptr), cudaSuccess);
      const auto got = dout.host();
      std::vector<const uint8_t*> kr, vr;
      std::vector<float> scores(n_kv_max), tmp(D), ref(D);
      for (int t = 0; t < T; ++t) {
        if (pos[t] < 0) continue;
        for (int h = 0; h < Hq; ++h) {
          kr.clear(), vr.clear();
          for (int j = 0; j <= pos[t]; ++j) {
            const size_t slot = size_t(table[j / bs]) * bs + j % bs;
            kr.push_back(reinterpret_cast<const uint8_t*>(k16.data() + slot * row + (h / (Hq / Hkv)) * D));
            vr.push_back(reinterpret_cast<const uint8_t*>(v16.data() + slot * row + (h / (Hq / Hkv)) * D));
          }
          attend_head(q.data() + (size_t(t) * Hq + h) * D, kr.data(), vr.data(), ggml_type::f16, pos[t] + 1, D,
                      a.scale, scores.data(), tmp.data(), ref.data());
          for (int d = 0; d < D; ++d)
            ASSERT_NEAR(got[(size_t(t) * Hq + h) * D + d], ref[d], 2e-5f)
                << "D " << D << " split " << split << " t " << t << " h " << h;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tandem
