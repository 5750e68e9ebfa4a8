// The decode-batch GEMM against the CPU reference on random inputs: every supported type, 1..64
// tokens, row counts off the tile size, n_in cut into pieces, y += W·x, the fragment blocks'
// 256-row form; a token's result does not depend on how many share the launch; bad sizes are
// refused. Skips without a CUDA device. Plus a
// bandwidth benchmark (big.qgemm_bandwidth) on an 8B model's shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/layer_ops.h"
#include "kernels/qgemm.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "kernel_test_util.h"

namespace tandem {
namespace {

using test::dev;
using test::hbm_matrix;
using test::quantize_matrix;
using test::randoms;
using test::time_us;

using test::f16_round;

const ggml_type k_types[] = {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1,
                             ggml_type::q8_0, ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k};

struct qgemm_case {
  ggml_type type;
  int64_t n_in, n_out;
  int n_tok;
  bool add;
};

// Runs one launch; y starts as y0 (read by add), x as floats converted on the device.
std::vector<float> run(const qgemm_case& c, const std::vector<uint8_t>& q, const std::vector<float>& x,
                       const std::vector<float>& y0) {
  dev<uint8_t> w(q);
  dev<float> dx(x), y(y0);
  dev<uint16_t> x16(x.size());
  dev<uint8_t> work(qgemm_work_bytes(c.n_in, c.n_out, c.n_tok));
  EXPECT_EQ(launch_to_f16(dx.p, x16.p, int64_t(x.size()), nullptr), cudaSuccess);
  EXPECT_EQ(launch_qgemm(c.type, w.p, c.n_in, c.n_out, x16.p, c.n_tok, y.p, c.add, work.p, nullptr), cudaSuccess);
  return y.host();
}

void check(const qgemm_case& c) {
  SCOPED_TRACE(std::string(type_info(c.type).name) + " n_in " + std::to_string(c.n_in) + " n_out " +
               std::to_string(c.n_out) + " tokens " + std::to_string(c.n_tok) + (c.add ? " add" : ""));
  const auto wf = randoms(size_t(c.n_in * c.n_out), 11);
  const auto q = quantize_matrix(c.type, wf, c.n_in, c.n_out);
  const auto x = randoms(size_t(c.n_in) * c.n_tok, 12);
  const auto y0 = c.add ? randoms(size_t(c.n_out) * c.n_tok, 13) : std::vector<float>(size_t(c.n_out) * c.n_tok);
  const auto got = run(c, q, x, y0);
  const uint64_t rb = *row_bytes(c.type, uint64_t(c.n_in));
  std::vector<float> deq(size_t(c.n_in));
  for (int64_t o = 0; o < c.n_out; ++o) {
    test::gemm_weights(c.type, q.data() + o * rb, c.n_in, deq.data());
    for (int t = 0; t < c.n_tok; ++t) {
      const size_t yi = size_t(t) * c.n_out + o;
      double ref = c.add ? y0[yi] : 0.0, mag = std::fabs(ref);
      for (int64_t i = 0; i < c.n_in; ++i) {
        const double p = double(deq[i]) * f16_round(x[size_t(t) * c.n_in + i]);
        ref += p, mag += std::fabs(p);
      }
      // Both operands are rounded to fp16 as the kernel rounds them and fp16 products are exact
      // in fp32: only the fp32 accumulation differs (tensor cores' truncating adders, about
      // n_in / 16 roundings of 2^-22 of sum |w x|, plus the pieces' sums): 4e-5 at n_in 2048.
      ASSERT_NEAR(got[yi], ref, 4e-5 * mag + 1e-5) << "row " << o << " token " << t;
    }
  }
}

TEST(qgemm, matches_cpu_for_every_type) {
  REQUIRE_GPU();
  for (ggml_type t : k_types) {
    check({t, 256, 100, 9, false});
    check({t, 512, 64, 64, true});
  }
}

TEST(qgemm, matches_cpu_for_token_counts_and_pieces) {
  REQUIRE_GPU();
  // One 64-row tile over 2048 inputs is cut into pieces (qgemm_splits > 1): the pieces' sums.
  ASSERT_GT(qgemm_splits(2048, 64), 1);
  for (int n_tok : {9, 16, 17, 33, 48, 64}) check({ggml_type::q4_k, 2048, 64, n_tok, n_tok % 2 == 1});
  check({ggml_type::q6_k, 1024, 777, 40, false});
  // Up to 8 tokens (one 8-token tile of the fragment blocks), 1 to 8 tiles for Q6_K, and Q6_K
  // rows of 3 and 9 blocks: 210-byte blocks leave such rows at different alignments.
  for (int n_tok : {1, 5, 8}) check({ggml_type::q4_k, 2048, 64, n_tok, n_tok == 5});
  for (int n_tok : {1, 9, 23, 64}) check({ggml_type::q6_k, 2048, 130, n_tok, n_tok == 9});
  check({ggml_type::q6_k, 768, 100, 24, false});
  check({ggml_type::q6_k, 2304, 70, 13, true});
  check({ggml_type::q4_k, 2304, 70, 57, false});
  check({ggml_type::q8_0, 384, 130, 64, true});
  // Pieces of an odd count of K steps: the last stage of the last piece holds one step.
  ASSERT_GT(qgemm_splits(2432, 64), 1);
  check({ggml_type::q5_0, 2432, 70, 24, false});
}

// Each of the first n tokens of a 64-token product gets the same bits when the launch has only
// those n tokens (other block shapes and token tiles, the same products in the same order).
void expect_same_bits_as_64(ggml_type t, int64_t n_in, int64_t n_out, uint32_t seed, std::initializer_list<int> ns) {
  const auto q = quantize_matrix(t, randoms(size_t(n_in * n_out), seed), n_in, n_out);
  const auto x = randoms(size_t(n_in) * 64, seed + 1);
  const auto all = run({t, n_in, n_out, 64, false}, q, x, std::vector<float>(size_t(n_out) * 64));
  for (int n_tok : ns) {
    const std::vector<float> few_x(x.begin(), x.begin() + n_in * n_tok);
    const auto few = run({t, n_in, n_out, n_tok, false}, q, few_x, std::vector<float>(size_t(n_out) * n_tok));
    for (size_t i = 0; i < few.size(); ++i) ASSERT_EQ(few[i], all[i]) << n_tok << " tokens, output " << i;  // bitwise
  }
}

TEST(qgemm, a_tokens_result_does_not_depend_on_the_batch) {
  REQUIRE_GPU();
  expect_same_bits_as_64(ggml_type::q4_k, 2048, 192, 21, {9});
}

// Q6_K at 49-64 tokens on a matrix whose grid of 256-row blocks fills the GPU: the 16-warp blocks
// (on an H100/H200-class device, unless TANDEM_QGEMM_FRAG_TALL=0 keeps the 128-row ones), rows
// off 256, n_in in pieces, 7 and 8 token tiles, y += W·x; and each token's result has the same
// bits as from the 128-row blocks (41 tokens) and the 64-row ones (9 tokens): the same products in
// the same order.
bool expect_tall_blocks() {
  int dev = 0, major = 0;
  const char* e = std::getenv("TANDEM_QGEMM_FRAG_TALL");
  return qgemm_frag_serves(ggml_type::q6_k) && !(e && std::string(e) == "0") && cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess && major == 9;
}

TEST(qgemm, tall_blocks_match_cpu) {
  REQUIRE_GPU();
  const int64_t n_in = 2048, n_out = 4000;
  ASSERT_GT(qgemm_splits(n_in, n_out), 1);
  std::printf("Q6_K %lld x %lld, %d pieces: %d rows a block at 64 tokens, %d at 48\n", static_cast<long long>(n_out),
              static_cast<long long>(n_in), qgemm_splits(n_in, n_out), qgemm_block_rows(ggml_type::q6_k, n_in, n_out, 64),
              qgemm_block_rows(ggml_type::q6_k, n_in, n_out, 48));
  if (expect_tall_blocks()) {
    EXPECT_EQ(qgemm_block_rows(ggml_type::q6_k, n_in, n_out, 64), 256);
  }
  for (int n_tok : {50, 64}) check({ggml_type::q6_k, n_in, n_out, n_tok, n_tok == 50});
}

TEST(qgemm, tall_blocks_give_the_same_bits) {
  REQUIRE_GPU();
  expect_same_bits_as_64(ggml_type::q6_k, 2048, 4000, 31, {9, 41, 57});
}

TEST(qgemm, refuses_bad_sizes) {
  REQUIRE_GPU();
  dev<uint8_t> w(size_t(1) << 20);
  dev<uint16_t> x(size_t(64) * 1024);
  dev<float> y(size_t(64) * 1024);
  const auto launch = [&](ggml_type t, int64_t n_in, int n_tok, const void* wp) {
    return launch_qgemm(t, wp, n_in, 64, x.p, n_tok, y.p, false, nullptr, nullptr);
  };
  EXPECT_EQ(launch(ggml_type::q4_0, 256, 0, w.p), cudaErrorInvalidValue);
  EXPECT_EQ(launch(ggml_type::q4_0, 256, k_qgemm_max_tokens + 1, w.p), cudaErrorInvalidValue);
  EXPECT_EQ(launch(ggml_type::q4_0, 96, 16, w.p), cudaErrorInvalidValue);   // not a multiple of 128
  EXPECT_EQ(launch(ggml_type::q4_k, 128, 16, w.p), cudaErrorInvalidValue);  // not whole Q4_K blocks
  EXPECT_EQ(launch(ggml_type::bf16, 256, 16, w.p), cudaErrorInvalidValue);
  EXPECT_EQ(launch(ggml_type::f16, 256, 16, w.p), cudaErrorInvalidValue);  // the GEMM path's
  EXPECT_EQ(launch(ggml_type::f32, 256, 16, w.p), cudaErrorInvalidValue);
  EXPECT_EQ(launch(ggml_type::q4_0, 256, 16, static_cast<const uint8_t*>(w.p) + 2), cudaErrorMisalignedAddress);
  // Two pieces of 256 inputs for one 64-row tile: their sums need the workspace.
  ASSERT_GT(qgemm_work_bytes(512, 64, 16), 0u);
  EXPECT_EQ(launch(ggml_type::q4_0, 512, 16, w.p), cudaErrorInvalidValue);
  dev<uint8_t> work(qgemm_work_bytes(512, 64, 16));
  EXPECT_EQ(launch_qgemm(ggml_type::q4_0, w.p, 512, 64, x.p, 16, y.p, false, work.p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// GPU microseconds and GB/s of weights per launch (the f16 conversion of x left out, the pieces'
// sum in) on an 8B model's shapes: wq/wo 4096 x 4096, gate/up 12288 x 4096, down 4096 x 12288,
// the head 151936 x 4096; launches cycle over copies of the matrix (together > 256 MiB, over 4x
// the L2) so weights come from HBM. Matrices are one quantized 64-row tile repeated. Asserts
// only that the launches succeed.
TEST(big, qgemm_bandwidth) {
  REQUIRE_GPU();
  struct shape {
    int64_t n_out, n_in;
    ggml_type only;  // f32: every type below
  };
  std::printf("%-5s %-14s %6s %3s %8s %7s\n", "type", "n_out x n_in", "pieces", "tok", "us", "GB/s");
  for (const shape sh : {shape{4096, 4096, ggml_type::f32}, shape{12288, 4096, ggml_type::f32},
                         shape{4096, 12288, ggml_type::f32}, shape{151936, 4096, ggml_type::q6_k}}) {
    for (ggml_type t : {ggml_type::q4_k, ggml_type::q6_k, ggml_type::q8_0}) {
      if (sh.only != ggml_type::f32 && t != sh.only) continue;
      const hbm_matrix w(t, sh.n_in, sh.n_out);
      const size_t mat = w.bytes();
      for (int n_tok : {9, 16, 32, 48, 56, 64}) {
        dev<uint16_t> x16(size_t(sh.n_in) * n_tok, 0x20);
        dev<float> y(size_t(sh.n_out) * n_tok);
        dev<uint8_t> work(qgemm_work_bytes(sh.n_in, sh.n_out, n_tok));
        cudaError_t err = cudaSuccess;
        const double us = time_us(
            [&](int i, cudaStream_t s) {
              const cudaError_t e = launch_qgemm(t, w.at(i), sh.n_in, sh.n_out, x16.p, n_tok,
                                                 y.p, false, work.p, s);
              if (e != cudaSuccess) err = e;
            },
            true);
        ASSERT_EQ(err, cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::printf("%-5s %6lld x %-6lld %6d %3d %8.1f %7.0f\n", std::string(type_name(t)).c_str(),
                    static_cast<long long>(sh.n_out), static_cast<long long>(sh.n_in),
                    qgemm_splits(sh.n_in, sh.n_out), n_tok, us, double(mat) / (us * 1e-6) / 1e9);
      }
    }
  }
}

}  // namespace
}  // namespace tandem
