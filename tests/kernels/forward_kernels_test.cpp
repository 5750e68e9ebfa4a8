// The forward-pass kernels (layer ops, paged attention) against the CPU reference
// operations on random inputs. Tolerances are stated per check; skips without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
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
#include "kernel_test_util.h"

namespace tandem {
namespace {

using test::dev;
using test::have_gpu;
using test::quantize_matrix;
using test::randoms;

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
  // Wide rows take the register-resident kernel (in place too).
  for (int wide : {1024, 4096, 5120}) {
    const auto xw = randoms(2 * wide, 7, -3.f, 3.f), ww = randoms(wide, 8, 0.5f, 1.5f);
    dev<float> dxw(xw), dww(ww);
    ASSERT_EQ(launch_rms_norm(dxw.p, dww.p, dxw.p, 2, wide, 1e-6f, nullptr), cudaSuccess);
    const auto gw = dxw.host();
    std::vector<float> rw(wide);
    for (int t = 0; t < 2; ++t) {
      rms_norm(xw.data() + t * wide, ww.data(), rw.data(), wide, 1e-6f);
      for (int i = 0; i < wide; ++i) ASSERT_NEAR(gw[t * wide + i], rw[i], 1e-5f * std::fabs(rw[i]) + 1e-6f) << wide;
    }
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

// The fused decode step (per-head RMSNorm, RoPE, K/V store) against the CPU's rms_norm and rope
// (1e-5, as the separate kernels) and, for the stored rows, the CPU's own conversion of the
// values the kernel produced: f16 / f32 / q8_0 bytes must match exactly. Rotations computed on
// the GPU per row, taken from the host's table (rope_rotations, as the decode step passes them)
// and from launch_rope_table's (as a prefill pass makes it).
TEST(layer_ops, qk_rope_store_matches_cpu) {
  REQUIRE_GPU();
  for (ggml_type ct : {ggml_type::f16, ggml_type::f32, ggml_type::q8_0})
    for (int D : {64, 128})
      for (int mode = 0; mode < 4; ++mode) {  // no norm; norm; norm with the host's / the GPU's table
        const bool norm = mode > 0, table = mode >= 2;
        const int T = 3, Hq = 4, Hkv = 2, rope_dim = D == 64 ? 48 : D, n_slots = 11;
        const bool neox = norm;  // both styles, each with and without the norm
        const auto q = randoms(size_t(T) * Hq * D, 61), k = randoms(size_t(T) * Hkv * D, 62),
                   v = randoms(size_t(T) * Hkv * D, 63);
        const auto qn = randoms(D, 64, 0.5f, 1.5f), kn = randoms(D, 65, 0.5f, 1.5f);
        const std::vector<int32_t> pos = {5, 900, 70000}, slots = {7, 0, 10};
        const uint64_t rb = ct == ggml_type::q8_0 ? uint64_t(Hkv) * D / 32 * 34 : uint64_t(Hkv) * D * (ct == ggml_type::f16 ? 2 : 4);
        dev<float> dq(q), dk(k), dv(v), dqn(qn), dkn(kn);
        dev<int32_t> dpos(pos), dslots(slots);
        dev<uint8_t> kc(rb * n_slots), vc(rb * n_slots);
        std::vector<float> rot(size_t(T) * rope_dim);
        for (int t = 0; t < T; ++t) rope_rotations(pos[t], rope_dim, 1e6f, rot.data() + size_t(t) * rope_dim);
        dev<float> drot(rot);
        if (mode == 3) {  // launch_rope_table, as a prefill pass computes it: the host's floats within an ulp
          ASSERT_EQ(launch_rope_table(dpos.p, T, rope_dim, 1e6f, drot.p, nullptr), cudaSuccess);
          const auto g = drot.host();
          for (size_t i = 0; i < rot.size(); ++i) ASSERT_NEAR(g[i], rot[i], 1.2e-7f * std::fabs(rot[i]) + 1e-30f) << i;
        }
        qk_rope_store_args a;
        a.q = dq.p, a.k = dk.p, a.v = dv.p, a.q_norm = norm ? dqn.p : nullptr, a.k_norm = norm ? dkn.p : nullptr;
        a.eps = 1e-6f, a.pos = dpos.p, a.n_tok = T, a.n_head = Hq, a.n_head_kv = Hkv, a.head_dim = D;
        a.rope_dim = rope_dim, a.theta = 1e6f, a.neox = neox;
        a.k_cache = kc.p, a.v_cache = vc.p, a.cache_type = ct, a.slots = dslots.p;
        if (table) a.rot = drot.p;
        ASSERT_EQ(launch_qk_rope_store(a, nullptr), cudaSuccess);
        const auto gq = dq.host(), gk = dk.host();
        const auto gkc = kc.host(), gvc = vc.host();
        const std::string what = std::string(type_name(ct)) + " D " + std::to_string(D) + " mode " + std::to_string(mode);
        for (int t = 0; t < T; ++t) {
          for (int which = 0; which < 2; ++which) {
            const int H = which == 0 ? Hq : Hkv;
            const auto& src = which == 0 ? q : k;
            const auto& got = which == 0 ? gq : gk;
            std::vector<float> r(src.begin() + size_t(t) * H * D, src.begin() + size_t(t + 1) * H * D);
            if (norm)
              for (int h = 0; h < H; ++h)
                rms_norm(r.data() + h * D, (which == 0 ? qn : kn).data(), r.data() + h * D, D, 1e-6f);
            rope(r.data(), H, D, rope_dim, pos[t], 1e6f, neox ? rope_style::neox : rope_style::normal);
            for (int i = 0; i < H * D; ++i)
              ASSERT_NEAR(got[size_t(t) * H * D + i], r[i], 1e-5f * std::fabs(r[i]) + 1e-5f) << what << " t " << t;
          }
          // The cache rows: the CPU's conversion of the kernel's k and of v.
          std::vector<uint8_t> want(rb);
          for (int which = 0; which < 2; ++which) {
            const float* row = (which == 0 ? gk.data() : v.data()) + size_t(t) * Hkv * D;
            quantize_kv_row(ct, row, want.data(), int64_t(Hkv) * D);
            const auto& cache = which == 0 ? gkc : gvc;
            for (uint64_t b = 0; b < rb; ++b)
              ASSERT_EQ(cache[slots[t] * rb + b], want[b]) << what << (which ? " v" : " k") << " t " << t << " byte " << b;
          }
        }
      }
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
  // 16-byte loads (rows of a multiple of 4) and the scalar scan (odd rows).
  for (int64_t V : {50000, 50001}) {
    auto logits = randoms(3 * V, 6);
    logits[V + 123] = 5.f, logits[V + 7] = 5.f;  // a tie: the first index wins
    logits[2 * V + V - 1] = 7.f;                  // the largest at the very end
    dev<float> dl(logits);
    dev<int32_t> di(size_t(3));
    ASSERT_EQ(launch_argmax(dl.p, 3, V, di.p, nullptr), cudaSuccess);
    const auto got = di.host();
    for (int r = 0; r < 3; ++r) {
      const auto b = logits.begin() + r * V;
      EXPECT_EQ(got[r], std::max_element(b, b + V) - b) << "V " << V << " row " << r;
    }
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
    dev<float> dq(q), dout(size_t(T) * Hq * D), work(paged_attention_work_floats(T, Hq, D, 32), 0);  // counters start at 0
    dev<int32_t> dtab(table), dtt(std::vector<int32_t>(T, 0)), dpos(pos);
    paged_attention_args a;
    a.q = dq.p, a.k_cache = dk.p, a.v_cache = dv.p, a.cache_type = ggml_type::f16, a.out = dout.p;
    a.block_tables = dtab.p, a.tok_table = dtt.p, a.tok_pos = dpos.p;
    a.n_tok = T, a.n_head = Hq, a.n_head_kv = Hkv, a.head_dim = D, a.block_size = bs, a.max_blocks = n_blocks;
    a.max_kv = n_kv_max, a.scale = 1.f / std::sqrt(float(D));
    // Also the int8 copy of out for the next mat-vec, from both the single and the split path.
    dev<uint8_t> qwork(matvec_work_bytes(int64_t(Hq) * D, T));
    const matvec_qx qx = matvec_x_parts(qwork.p, int64_t(Hq) * D, T);
    a.out_q = qx.q, a.out_ds = qx.ds;
    // The split path twice, out poisoned before each run: the first run must leave its split
    // counters at zero for the second to merge again.
    for (bool split : {false, true, true}) {
      ASSERT_EQ(cudaMemset(dout.p, 0x7f, dout.n * sizeof(float)), cudaSuccess);
      ASSERT_EQ(launch_paged_attention(a, split ? work.p : nullptr, split ? work.n : 0, nullptr), cudaSuccess);
      const auto got = dout.host();
      const auto qbytes = qwork.host();
      const auto* gq = reinterpret_cast<const int8_t*>(qbytes.data());
      const auto* gds = reinterpret_cast<const float2*>(qbytes.data() + (reinterpret_cast<uint8_t*>(qx.ds) - qwork.p));
      for (int t = 0; t < T; ++t) {
        if (pos[t] < 0) continue;
        for (int b = 0; b < Hq * D / 32; ++b) {
          const float* v = got.data() + size_t(t) * Hq * D + 32 * b;
          float amax = 0.f;
          for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
          const float d = amax / 127.f;
          int sum = 0;
          for (int i = 0; i < 32; ++i) {
            const int q = amax > 0.f ? int(std::nearbyint(v[i] / d)) : 0;
            sum += q;
            ASSERT_EQ(gq[size_t(t) * Hq * D + 32 * b + i], q) << "split " << split << " t " << t << " block " << b;
          }
          const float2 ds = gds[size_t(t) * Hq * D / 32 + b];
          ASSERT_EQ(ds.x, d);
          ASSERT_EQ(ds.y, d * float(sum));
        }
      }
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
