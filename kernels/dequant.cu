// Dequantize kernels: ggml-typed device tensors to float32 or fp16, one launch per tensor.
// Each thread expands four consecutive weights and writes them with one vector store.
#include "kernels/dequant.h"

#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/quant_blocks.cuh"

namespace tandem {
namespace {

constexpr int k_threads = 256;
// Grid-stride loops let any tensor size run in one launch; 65535 blocks of 256 threads are
// far more than enough resident threads to saturate memory bandwidth on any target GPU.
constexpr int64_t k_max_grid = 65535;

unsigned grid_for(int64_t work_items) {
  const int64_t blocks = (work_items + k_threads - 1) / k_threads;
  return static_cast<unsigned>(blocks < k_max_grid ? blocks : k_max_grid);
}

__device__ __forceinline__ void store4(float* dst, const float (&y)[4]) {
  *reinterpret_cast<float4*>(dst) = make_float4(y[0], y[1], y[2], y[3]);
}

__device__ __forceinline__ void store4(uint16_t* dst, const float (&y)[4]) {
  uint2 packed;
  packed.x = static_cast<uint32_t>(float_to_fp16(y[0])) | (static_cast<uint32_t>(float_to_fp16(y[1])) << 16);
  packed.y = static_cast<uint32_t>(float_to_fp16(y[2])) | (static_cast<uint32_t>(float_to_fp16(y[3])) << 16);
  *reinterpret_cast<uint2*>(dst) = packed;
}

__device__ __forceinline__ void store1(float* dst, float y) { *dst = y; }
__device__ __forceinline__ void store1(uint16_t* dst, float y) { *dst = float_to_fp16(y); }

// Work item i is chunk i % (qk/4) of block i / (qk/4): consecutive threads write consecutive
// 16-byte pieces (coalesced stores) and a thread block covers a contiguous run of blocks.
template <class Block, class Out>
__global__ void __launch_bounds__(k_threads)
    dequant_blocks_kernel(const Block* __restrict__ src, Out* __restrict__ dst, int64_t n_chunks) {
  constexpr int chunks_per_block = block_traits<Block>::qk / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_chunks; i += stride) {
    float y[4];
    dequant4(src[i / chunks_per_block], static_cast<int>(i % chunks_per_block), y);
    store4(dst + 4 * i, y);
  }
}

struct from_f32 {
  using in = float;
  static __device__ __forceinline__ float apply(float x) { return x; }
};
struct from_f16 {
  using in = uint16_t;
  static __device__ __forceinline__ float apply(uint16_t x) { return fp16_to_float(x); }
};
struct from_bf16 {
  using in = uint16_t;
  static __device__ __forceinline__ float apply(uint16_t x) { return bf16_to_float(x); }
};

// Unblocked types: one element per thread (no alignment demands, any n).
template <class Conv, class Out>
__global__ void __launch_bounds__(k_threads)
    convert_kernel(const typename Conv::in* __restrict__ src, Out* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    store1(dst + i, Conv::apply(src[i]));
}

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

template <class Block, class Out>
cudaError_t launch_blocks(const void* src, Out* dst, int64_t n, cudaStream_t stream) {
  constexpr int qk = block_traits<Block>::qk;
  if (n % qk != 0) return cudaErrorInvalidValue;
  if (!aligned(src, alignof(Block)) || !aligned(dst, 4 * sizeof(Out))) return cudaErrorMisalignedAddress;
  if (n == 0) return cudaSuccess;
  const int64_t n_chunks = n / 4;
  dequant_blocks_kernel<Block, Out>
      <<<grid_for(n_chunks), k_threads, 0, stream>>>(static_cast<const Block*>(src), dst, n_chunks);
  return cudaGetLastError();
}

template <class Conv, class Out>
cudaError_t launch_convert(const void* src, Out* dst, int64_t n, cudaStream_t stream) {
  using in = typename Conv::in;
  if (!aligned(src, alignof(in)) || !aligned(dst, alignof(Out))) return cudaErrorMisalignedAddress;
  if (n == 0) return cudaSuccess;
  convert_kernel<Conv, Out><<<grid_for(n), k_threads, 0, stream>>>(static_cast<const in*>(src), dst, n);
  return cudaGetLastError();
}

template <class Out>
cudaError_t launch_any(ggml_type t, const void* src, Out* dst, int64_t n, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  switch (t) {
    case ggml_type::f32: return launch_convert<from_f32>(src, dst, n, stream);
    case ggml_type::f16: return launch_convert<from_f16>(src, dst, n, stream);
    case ggml_type::bf16: return launch_convert<from_bf16>(src, dst, n, stream);
    case ggml_type::q4_0: return launch_blocks<block_q4_0>(src, dst, n, stream);
    case ggml_type::q4_1: return launch_blocks<block_q4_1>(src, dst, n, stream);
    case ggml_type::q5_0: return launch_blocks<block_q5_0>(src, dst, n, stream);
    case ggml_type::q5_1: return launch_blocks<block_q5_1>(src, dst, n, stream);
    case ggml_type::q8_0: return launch_blocks<block_q8_0>(src, dst, n, stream);
    case ggml_type::q4_k: return launch_blocks<block_q4_k>(src, dst, n, stream);
    case ggml_type::q5_k: return launch_blocks<block_q5_k>(src, dst, n, stream);
    case ggml_type::q6_k: return launch_blocks<block_q6_k>(src, dst, n, stream);
    default: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool gpu_can_dequantize(ggml_type t) {
  switch (t) {
    case ggml_type::f32:
    case ggml_type::f16:
    case ggml_type::bf16:
    case ggml_type::q4_0:
    case ggml_type::q4_1:
    case ggml_type::q5_0:
    case ggml_type::q5_1:
    case ggml_type::q8_0:
    case ggml_type::q4_k:
    case ggml_type::q5_k:
    case ggml_type::q6_k: return true;
    default: return false;
  }
}

cudaError_t launch_dequantize(ggml_type t, const void* src, float* dst, int64_t n, cudaStream_t stream) {
  // A plain copy needs no kernel.
  if (t == ggml_type::f32 && n >= 0)
    return n == 0 ? cudaSuccess : cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDefault, stream);
  return launch_any(t, src, dst, n, stream);
}

cudaError_t launch_dequantize_f16(ggml_type t, const void* src, uint16_t* dst, int64_t n,
                                  cudaStream_t stream) {
  if (t == ggml_type::f16 && n >= 0)
    return n == 0 ? cudaSuccess : cudaMemcpyAsync(dst, src, n * sizeof(uint16_t), cudaMemcpyDefault, stream);
  return launch_any(t, src, dst, n, stream);
}

}  // namespace tandem
