// GPU dequantize kernels against the CPU reference (quant/quant.h) for every supported type,
// on quantized random floats and on random block bytes. Skips when no CUDA device is present.
#include "kernels/dequant.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace tandem {

// gtest prints test parameters with this (found by argument-dependent lookup).
void PrintTo(ggml_type t, std::ostream* os) { *os << type_name(t); }

namespace {

// Guard elements after each output buffer: a kernel writing past n would change them.
constexpr int64_t k_guard = 64;
constexpr uint8_t k_guard_byte = 0x7b;

const std::vector<ggml_type> k_types = {
    ggml_type::f32,  ggml_type::f16,  ggml_type::bf16, ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0,
    ggml_type::q5_1, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k};

std::string cuda_device_problem() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(e);
  if (count == 0) return "cudaGetDeviceCount returned 0 devices";
  return "";
}

struct device_buffer {
  void* p = nullptr;
  device_buffer() = default;
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() {
    if (p) TANDEM_CUDA_LOG(cudaFree(p));
  }
};

struct gpu_output {
  std::vector<float> f32;      // n + k_guard
  std::vector<uint16_t> f16;   // n + k_guard
};

// Uploads the blocks, runs both launchers on `stream` and downloads the results with guards.
status run_gpu(ggml_type t, const std::vector<uint8_t>& src, int64_t n, cudaStream_t stream, gpu_output& out) {
  device_buffer d_src, d_f32, d_f16;
  const size_t f32_bytes = (n + k_guard) * sizeof(float), f16_bytes = (n + k_guard) * sizeof(uint16_t);
  TANDEM_CUDA_TRY(cudaMalloc(&d_src.p, src.size()));
  TANDEM_CUDA_TRY(cudaMalloc(&d_f32.p, f32_bytes));
  TANDEM_CUDA_TRY(cudaMalloc(&d_f16.p, f16_bytes));
  TANDEM_CUDA_TRY(cudaMemcpyAsync(d_src.p, src.data(), src.size(), cudaMemcpyHostToDevice, stream));
  TANDEM_CUDA_TRY(cudaMemsetAsync(d_f32.p, k_guard_byte, f32_bytes, stream));
  TANDEM_CUDA_TRY(cudaMemsetAsync(d_f16.p, k_guard_byte, f16_bytes, stream));
  TANDEM_CUDA_TRY(launch_dequantize(t, d_src.p, static_cast<float*>(d_f32.p), n, stream));
  TANDEM_CUDA_TRY(launch_dequantize_f16(t, d_src.p, static_cast<uint16_t*>(d_f16.p), n, stream));
  out.f32.resize(n + k_guard);
  out.f16.resize(n + k_guard);
  TANDEM_CUDA_TRY(cudaMemcpyAsync(out.f32.data(), d_f32.p, f32_bytes, cudaMemcpyDeviceToHost, stream));
  TANDEM_CUDA_TRY(cudaMemcpyAsync(out.f16.data(), d_f16.p, f16_bytes, cudaMemcpyDeviceToHost, stream));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(stream));
  return {};
}

bool guard_intact(const void* tail, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(tail);
  for (size_t i = 0; i < bytes; ++i)
    if (p[i] != k_guard_byte) return false;
  return true;
}

std::string hex_bits(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}
uint32_t bits_of(uint16_t v) { return v; }

// Tolerance: none. The kernels evaluate the reference's formulas in the reference's order with
// separately rounded multiplies and adds (quant/ is built with -ffp-contract=off and the kernels
// use __fmul_rn/__fadd_rn), and both sides round float -> fp16 to nearest even, so every output
// must match bit for bit, float and fp16 alike.
template <class T>
::testing::AssertionResult bit_identical(const std::vector<T>& ref, const std::vector<T>& got, int64_t n) {
  int64_t bad = 0;
  std::string first;
  for (int64_t i = 0; i < n; ++i) {
    if (bits_of(ref[i]) == bits_of(got[i])) continue;
    if (bad++ == 0)
      first = "element " + std::to_string(i) + ": cpu " + hex_bits(bits_of(ref[i])) + " gpu " +
              hex_bits(bits_of(got[i]));
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " outputs differ; first " << first;
}

// Random floats, never zero, with magnitudes varying by block so scales differ between blocks.
std::vector<float> random_floats(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> mag(0.05f, 1.0f), block_scale(0.1f, 10.0f);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> x(n);
  float scale = 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 32 == 0) scale = block_scale(rng);
    x[i] = (neg(rng) ? -1.0f : 1.0f) * mag(rng) * scale;
  }
  return x;
}

// A normal, finite, non-zero fp16 with a biased exponent in [e_lo, e_hi] and random sign.
uint16_t random_half(std::mt19937& rng, int e_lo, int e_hi) {
  std::uniform_int_distribution<int> exp(e_lo, e_hi), mant(0, 1023), sign(0, 1);
  return static_cast<uint16_t>((sign(rng) << 15) | (exp(rng) << 10) | mant(rng));
}

void set_half(std::vector<uint8_t>& bytes, size_t at, uint16_t h) { std::memcpy(&bytes[at], &h, 2); }

// Random block bytes: every quant/scale bit pattern occurs, fp16 scale fields hold normal values
// in [2^-10, 1) so fp16 outputs stay finite. Plain types hold random finite values.
std::vector<uint8_t> random_block_bytes(ggml_type t, int64_t n, std::mt19937& rng) {
  const auto& info = type_info(t);
  std::vector<uint8_t> bytes(n / info.block_size * info.type_size);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
  if (t == ggml_type::f32) {
    const auto x = random_floats(n, rng);
    std::memcpy(bytes.data(), x.data(), bytes.size());
    return bytes;
  }
  if (t == ggml_type::f16) {
    for (int64_t i = 0; i < n; ++i) set_half(bytes, 2 * i, random_half(rng, 1, 30));
    return bytes;
  }
  if (t == ggml_type::bf16) {  // exponents 2^-14 .. 2^14: representable as fp16 too
    std::uniform_int_distribution<int> exp(113, 141), mant(0, 127), sign(0, 1);
    for (int64_t i = 0; i < n; ++i)
      set_half(bytes, 2 * i, static_cast<uint16_t>((sign(rng) << 15) | (exp(rng) << 7) | mant(rng)));
    return bytes;
  }
  std::vector<size_t> half_fields;
  switch (t) {
    case ggml_type::q4_0: half_fields = {offsetof(block_q4_0, d)}; break;
    case ggml_type::q4_1: half_fields = {offsetof(block_q4_1, d), offsetof(block_q4_1, m)}; break;
    case ggml_type::q5_0: half_fields = {offsetof(block_q5_0, d)}; break;
    case ggml_type::q5_1: half_fields = {offsetof(block_q5_1, d), offsetof(block_q5_1, m)}; break;
    case ggml_type::q8_0: half_fields = {offsetof(block_q8_0, d)}; break;
    case ggml_type::q4_k: half_fields = {offsetof(block_q4_k, d), offsetof(block_q4_k, dmin)}; break;
    case ggml_type::q5_k: half_fields = {offsetof(block_q5_k, d), offsetof(block_q5_k, dmin)}; break;
    case ggml_type::q6_k: half_fields = {offsetof(block_q6_k, d)}; break;
    default: ADD_FAILURE() << "no random block layout for " << type_name(t); break;
  }
  for (size_t b = 0; b < bytes.size(); b += info.type_size)
    for (size_t f : half_fields) set_half(bytes, b + f, random_half(rng, 5, 14));
  return bytes;
}

class dequant_gpu : public ::testing::TestWithParam<ggml_type> {
 protected:
  void SetUp() override {
    const std::string problem = cuda_device_problem();
    if (!problem.empty()) GTEST_SKIP() << "no CUDA device, GPU test skipped (" << problem << ")";
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_) TANDEM_CUDA_LOG(cudaStreamDestroy(stream_));
  }

  // Element counts: single blocks, runs that are not a multiple of a thread block's 1024
  // elements, and a few thousand blocks.
  std::vector<int64_t> sizes() const {
    const int64_t qk = type_info(GetParam()).block_size;
    if (qk == 1) return {1, 3, 255, 1000, 4097, 100003};
    if (qk == qk_small) return {32, 96, 1024, 37 * 32, 257 * 32, 4101 * 32};
    return {256, 3 * 256, 5 * 256, 33 * 256, 1000 * 256};
  }

  void check(const std::vector<uint8_t>& bytes, int64_t n) {
    const ggml_type t = GetParam();
    std::vector<float> ref(n);
    dequantize_row(t, bytes.data(), ref.data(), n);
    std::vector<uint16_t> ref16(n);
    quantize_row(ggml_type::f16, ref.data(), ref16.data(), n);

    gpu_output out;
    const status s = run_gpu(t, bytes, n, stream_, out);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(guard_intact(out.f32.data() + n, k_guard * sizeof(float))) << "float output overrun, n=" << n;
    EXPECT_TRUE(guard_intact(out.f16.data() + n, k_guard * sizeof(uint16_t))) << "fp16 output overrun, n=" << n;
    EXPECT_TRUE(bit_identical(ref, out.f32, n)) << type_name(t) << " to float, n=" << n;
    EXPECT_TRUE(bit_identical(ref16, out.f16, n)) << type_name(t) << " to fp16, n=" << n;
  }

  cudaStream_t stream_ = nullptr;
};

TEST_P(dequant_gpu, matches_cpu_on_quantized_random_floats) {
  const ggml_type t = GetParam();
  std::mt19937 rng(1234 + static_cast<unsigned>(t));
  for (int64_t n : sizes()) {
    const auto x = random_floats(n, rng);
    std::vector<uint8_t> bytes(*row_bytes(t, n));
    quantize_row(t, x.data(), bytes.data(), n);
    check(bytes, n);
  }
}

TEST_P(dequant_gpu, matches_cpu_on_random_block_bytes) {
  const ggml_type t = GetParam();
  std::mt19937 rng(777 + static_cast<unsigned>(t));
  for (int64_t n : sizes()) check(random_block_bytes(t, n, rng), n);
}

INSTANTIATE_TEST_SUITE_P(all_types, dequant_gpu, ::testing::ValuesIn(k_types),
                         [](const ::testing::TestParamInfo<ggml_type>& p) {
                           return std::string(type_name(p.param));
                         });

// More work items than the capped grid has threads (65535 blocks x 256), so the grid-stride
// loops run more than once: Q8_0 (4 weights per thread) and F16 (one per thread).
class dequant_gpu_large : public dequant_gpu {};

TEST_P(dequant_gpu_large, grid_stride_covers_everything) {
  std::mt19937 rng(99);
  const int64_t n = GetParam() == ggml_type::q8_0 ? (int64_t{1} << 26) + 5 * 32 : (int64_t{1} << 24) + 7;
  check(random_block_bytes(GetParam(), n, rng), n);
}

INSTANTIATE_TEST_SUITE_P(big, dequant_gpu_large, ::testing::Values(ggml_type::q8_0, ggml_type::f16),
                         [](const ::testing::TestParamInfo<ggml_type>& p) {
                           return std::string(type_name(p.param));
                         });

// Argument checks happen on the host before any CUDA call, so these run without a GPU.
TEST(dequant_launcher, supports_the_same_types_as_the_cpu) {
  for (uint32_t id = 0; id < 64; ++id) {
    const ggml_type_info* info = find_type_info(id);
    if (!info) continue;
    EXPECT_EQ(gpu_can_dequantize(info->type), can_dequantize(info->type)) << info->name;
  }
}

TEST(dequant_launcher, rejects_bad_arguments_without_launching) {
  float* dst = nullptr;
  uint16_t* dst16 = nullptr;
  EXPECT_EQ(launch_dequantize(ggml_type::q2_k, nullptr, dst, 256, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_dequantize_f16(ggml_type::iq4_nl, nullptr, dst16, 32, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_dequantize(ggml_type::q4_0, nullptr, dst, 33, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_dequantize(ggml_type::q6_k, nullptr, dst, 128, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_dequantize(ggml_type::q8_0, nullptr, dst, -32, nullptr), cudaErrorInvalidValue);
  // Addresses are never dereferenced: the alignment check refuses them first.
  float* odd_dst = reinterpret_cast<float*>(uintptr_t{4096 + 4});
  const void* odd_src = reinterpret_cast<const void*>(uintptr_t{4096 + 1});
  EXPECT_EQ(launch_dequantize(ggml_type::q4_k, nullptr, odd_dst, 256, nullptr), cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_dequantize(ggml_type::q4_0, odd_src, reinterpret_cast<float*>(uintptr_t{4096}), 32, nullptr),
            cudaErrorMisalignedAddress);
  EXPECT_EQ(launch_dequantize(ggml_type::q4_k, nullptr, dst, 0, nullptr), cudaSuccess);
}

}  // namespace
}  // namespace tandem
