// Decode mat-vec launchers. Rows that are 16-byte aligned go to the staged kernel
// (matvec_staged.cuh: coalesced 16-byte loads through shared memory); other rows to the simple
// warp-per-row kernel here, where each lane decodes whole units straight from global memory.
#include "kernels/matvec.h"

#include <cstdint>

#include "kernels/matvec_decode.cuh"
#include "kernels/matvec_staged.cuh"

namespace tandem {
namespace {

using mv::f16_unit;
using mv::f32_unit;
using mv::unit_traits;

constexpr int k_warps = 4;  // rows per thread block of the fallback kernel
constexpr int k_threads = 32 * k_warps;

// Fallback: one warp per row, lane u decoding units u, u + 32, ... from global memory. Slow
// (each load instruction touches 32 blocks) but needs only the blocks' own 2-byte alignment.
template <class B, int NT>
__global__ void __launch_bounds__(k_threads)
    matvec_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int units_per_row, int64_t n_in,
                  int64_t n_out, const float* __restrict__ x, int n_tok, float* __restrict__ y, bool add) {
  using U = unit_traits<B>;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * k_warps + threadIdx.x / 32;
  if (row >= n_out) return;
  const B* blocks = reinterpret_cast<const B*>(w + row * row_bytes);
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.f;
  for (int u = lane; u < units_per_row; u += 32) {
    const int bi = u / U::per_block, s = u % U::per_block;
    float wv[U::elems];
    mv::decode<mv::global_ld>(blocks[bi], s, wv);
    const float* xb = x + static_cast<int64_t>(bi) * U::qk + mv::unit_base(static_cast<const B*>(nullptr), s);
    mv::dot_unit<B, NT>(wv, xb, n_in, n_tok, acc);
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    float v = acc[t];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0 && t < n_tok) {
      float* out = y + static_cast<int64_t>(t) * n_out + row;
      *out = add ? *out + v : v;
    }
  }
}

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

template <class B, int NT>
cudaError_t launch_fallback_nt(const matvec_output& o, int64_t row_bytes, int64_t n_in, const float* x, int n_tok,
                               bool add, cudaStream_t stream) {
  using U = unit_traits<B>;
  const int64_t units = n_in / U::qk * U::per_block;
  const int64_t grid = (o.n_out + k_warps - 1) / k_warps;
  if (units > (1 << 30) || grid > 0x7fffffff) return cudaErrorInvalidValue;
  matvec_kernel<B, NT><<<static_cast<unsigned>(grid), k_threads, 0, stream>>>(
      static_cast<const uint8_t*>(o.w), row_bytes, static_cast<int>(units), n_in, o.n_out, x, n_tok, o.y, add);
  return cudaGetLastError();
}

template <class B>
cudaError_t launch_fallback(const matvec_output& o, int64_t row_bytes, int64_t n_in, const float* x, int n_tok,
                            bool add, cudaStream_t stream) {
  if (n_tok <= 1) return launch_fallback_nt<B, 1>(o, row_bytes, n_in, x, n_tok, add, stream);
  if (n_tok <= 2) return launch_fallback_nt<B, 2>(o, row_bytes, n_in, x, n_tok, add, stream);
  if (n_tok <= 4) return launch_fallback_nt<B, 4>(o, row_bytes, n_in, x, n_tok, add, stream);
  return launch_fallback_nt<B, 8>(o, row_bytes, n_in, x, n_tok, add, stream);
}

template <class B>
cudaError_t launch_type(int64_t n_in, const matvec_output* outs, int n_outs, const float* x, int n_tok, bool add,
                        cudaStream_t stream) {
  using U = unit_traits<B>;
  if (n_in % U::qk != 0) return cudaErrorInvalidValue;
  const int64_t row_bytes = n_in / U::qk * static_cast<int64_t>(sizeof(B));
  // 16-byte loads (F32, F16, Q4_K, Q5_K) need every row 16-byte aligned; the rest load 2 bytes.
  const bool wide = sizeof(B) % 16 == 0;
  bool staged = row_bytes % 16 == 0;
  if (!aligned(x, 16)) return cudaErrorMisalignedAddress;
  for (int i = 0; i < n_outs; ++i) {
    if (!aligned(outs[i].w, 16) || (wide && row_bytes % 16 != 0)) return cudaErrorMisalignedAddress;
    if (outs[i].n_out < 0) return cudaErrorInvalidValue;
  }
  if (staged) {
    mv::jobs jb;
    int64_t rows = 0;
    for (int i = 0; i < n_outs; ++i) {
      if (outs[i].n_out == 0) continue;
      jb.w[jb.n] = static_cast<const uint8_t*>(outs[i].w);
      jb.y[jb.n] = outs[i].y;
      jb.n_out[jb.n] = outs[i].n_out;
      jb.row_end[jb.n++] = rows += outs[i].n_out;
    }
    return jb.n == 0 ? cudaSuccess : mv::launch_staged<B>(jb, n_in, x, n_tok, add, stream);
  }
  for (int i = 0; i < n_outs; ++i) {
    if (outs[i].n_out == 0) continue;
    const cudaError_t e = launch_fallback<B>(outs[i], row_bytes, n_in, x, n_tok, add, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace

bool gpu_can_matvec(ggml_type t) {
  switch (t) {
    case ggml_type::f32:
    case ggml_type::f16:
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

cudaError_t launch_matvec_multi(ggml_type t, int64_t n_in, const matvec_output* outs, int n_outs, const float* x,
                                int n_tok, bool add, cudaStream_t stream) {
  if (n_in <= 0 || n_tok < 0 || n_tok > k_matvec_max_tokens || n_outs < 0 || n_outs > k_matvec_max_outputs)
    return cudaErrorInvalidValue;
  if (n_tok == 0 || n_outs == 0) return cudaSuccess;
  switch (t) {
    case ggml_type::f32: return launch_type<f32_unit>(n_in, outs, n_outs, x, n_tok, add, stream);
    case ggml_type::f16: return launch_type<f16_unit>(n_in, outs, n_outs, x, n_tok, add, stream);
    case ggml_type::q4_0: return launch_type<block_q4_0>(n_in, outs, n_outs, x, n_tok, add, stream);
    case ggml_type::q4_1: return launch_type<block_q4_1>(n_in, outs, n_outs, x, n_tok, add, stream);
    case ggml_type::q5_0: return launch_type<block_q5_0>(n_in, outs, n_outs, x, n_tok, add, stream);
    case ggml_type::q5_1: return launch_type<block_q5_1>(n_in, outs, n_outs, x, n_tok, add, stream);
    case ggml_type::q8_0: return launch_type<block_q8_0>(n_in, outs, n_outs, x, n_tok, add, stream);
    case ggml_type::q4_k: return launch_type<block_q4_k>(n_in, outs, n_outs, x, n_tok, add, stream);
    case ggml_type::q5_k: return launch_type<block_q5_k>(n_in, outs, n_outs, x, n_tok, add, stream);
    case ggml_type::q6_k: return launch_type<block_q6_k>(n_in, outs, n_outs, x, n_tok, add, stream);
    default: break;
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_matvec(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const float* x, int n_tok,
                          float* y, cudaStream_t stream) {
  if (n_out < 0) return cudaErrorInvalidValue;
  const matvec_output o{w, n_out, y};
  return launch_matvec_multi(t, n_in, &o, 1, x, n_tok, false, stream);
}

}  // namespace tandem
