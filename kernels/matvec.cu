// Decode mat-vec: x is quantized once per launch into int8 blocks of 32 (scale d = amax / 127 and
// d * sum q), then each thread block dots a few weight rows with it, its threads walking the row
// in consecutive small pieces (matvec_types.cuh) so that weight and x loads coalesce.
#include "kernels/matvec.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/device_attribute.h"
#include "kernels/matvec_fx.cuh"
#include "kernels/matvec_types.cuh"
#include "kernels/matvec_x.cuh"
#include "kernels/pdl.cuh"

namespace tandem {
namespace {

using namespace mv;

constexpr int k_max_jobs = k_matvec_max_outputs;

matvec_tuning g_tuning;

// Up to three matrices of one type and n_in that read the same x (Q/K/V, gate/up): job j owns
// global rows [row_end[j-1], row_end[j]) and writes y[j].
struct jobs {
  const uint8_t* w[k_max_jobs];
  float* y[k_max_jobs];
  int64_t n_out[k_max_jobs];
  int64_t row_end[k_max_jobs];
  int n = 0;
};

// One warp per 32-element block of x (blocks of all tokens are contiguous: n_in % 32 == 0).
__global__ void __launch_bounds__(256) quantize_x_kernel(const float* x, int64_t n_blocks, int8_t* qx,
                                                         float2* ds) {
  pdl_wait();
  // Lets the mat-vec kernel (launched as its programmatic dependent) start loading weights now.
  pdl_trigger();
  const int64_t b = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  if (b >= n_blocks) return;
  quantize_x_warp(x[32 * b + threadIdx.x % 32], qx + 32 * b, ds + b);
}

// The head's finer copy of x: token t's int8 copy becomes row 2t and the int8 copy of what it
// rounded away row 2t + 1 (a block's error falls from ~d / 2 to ~d / 500). One warp per block.
__global__ void __launch_bounds__(256) quantize_x2_kernel(const float* x, int64_t n_in, int64_t n_blocks,
                                                          int8_t* qx, float2* ds) {
  pdl_wait();
  pdl_trigger();
  const int64_t b = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  if (b >= n_blocks) return;
  const int64_t per_tok = n_in / 32, t = b / per_tok, j = b % per_tok;
  const float v = x[32 * b + threadIdx.x % 32];
  const float hi = quantize_x_warp(v, qx + 2 * t * n_in + 32 * j, ds + 2 * t * per_tok + j);
  quantize_x_warp(v - hi, qx + (2 * t + 1) * n_in + 32 * j, ds + (2 * t + 1) * per_tok + j);
}

// The job owning global row `row`. Constant indices only: indexing the parameter struct with a
// runtime index would copy it to local memory in every thread.
struct located {
  const uint8_t* w;
  float* y;
  int64_t n_out, local;
};
__device__ __forceinline__ located locate(const jobs& jb, int64_t row) {
  located l{jb.w[0], jb.y[0], jb.n_out[0], row};
  if (jb.n > 1 && row >= jb.row_end[0]) l = {jb.w[1], jb.y[1], jb.n_out[1], row - jb.row_end[0]};
  if (jb.n > 2 && row >= jb.row_end[1]) l = {jb.w[2], jb.y[2], jb.n_out[2], row - jb.row_end[1]};
  return l;
}

// Row group g = rows [g R, g R + R) (rows past the end redo the last row, unwritten): each
// row's start and the end of its matrix (no load may pass it).
template <int R>
__device__ __forceinline__ void group_rows(const jobs& jb, int64_t g, int64_t total, int64_t row_bytes,
                                           const uint8_t* (&wrow)[R], const uint8_t* (&wend)[R]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const located l = locate(jb, min(g * R + r, total - 1));
    wrow[r] = l.w + l.local * row_bytes;
    wend[r] = l.w + l.n_out * row_bytes;
  }
}

template <class Q, int R>
__device__ __forceinline__ void load_pieces(const uint8_t* const (&wrow)[R], const uint8_t* const (&wend)[R], int p,
                                            int n_pieces, typename Q::raw (&w)[R]) {
  if (p >= n_pieces) return;
  const int b = p / Q::ppb, k = p % Q::ppb;
#pragma unroll
  for (int r = 0; r < R; ++r)
    w[r] = Q::load(wrow[r] + static_cast<int64_t>(b) * sizeof(typename Q::block), k, wend[r]);
}

// Persistent thread blocks (as many as fit on the GPU at once) walk the row groups g =
// blockIdx.x, + gridDim.x, ...; all TB threads (one warp or four) work on every row of a group:
// thread i takes pieces i, i + TB, ... (piece p = block p / ppb, part p % ppb). The weights of a
// thread's next pieces (the next group's first ones at the end of a row) are loaded before the
// current ones are used, so every thread keeps loads in flight through the dot products and the
// reduction. Up to NT tokens (n_tok <= NT). With Pairs, x rows 2t and 2t + 1 (an int8 copy and
// its residual's) add up into output token t.
template <class Q, int NT, int R, int TB, bool Pairs, int WPB = 1>
__global__ void __launch_bounds__(TB * WPB)
    matvec_kernel(jobs jb, int n_blocks, int64_t row_bytes, x_view xs, int n_tok, bool add) {
  static_assert(WPB == 1 || TB == 32, "independent warps per block only for one-warp groups");
  // WPB > 1: each warp of the block is a persistent walker of its own (virtual block blockIdx.x WPB +
  // warp of gridDim.x WPB); fewer, larger blocks for the same warps.
  const unsigned tid = WPB > 1 ? threadIdx.x % 32 : threadIdx.x;
  constexpr int k_warps = TB / 32;
  using W = typename Q::raw;
  const int64_t total = jb.n == 1 ? jb.row_end[0] : jb.n == 2 ? jb.row_end[1] : jb.row_end[2];
  const int64_t n_groups = (total + R - 1) / R;
  const int n_pieces = n_blocks * Q::ppb;
  const int n_iter = (n_pieces + TB - 1) / TB;
  __shared__ float part[2][k_warps][R * NT];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  int64_t g = WPB > 1 ? blockIdx.x * WPB + threadIdx.x / 32 : blockIdx.x;
  const uint8_t* wrow[R];
  const uint8_t* wend[R];
  group_rows(jb, g, total, row_bytes, wrow, wend);
  W cur[R];
  load_pieces<Q, R>(wrow, wend, tid, n_pieces, cur);
  // Launched as a programmatic dependent of the previous kernel (the x quantization or producer):
  // weights need not wait for it, x (and y, for add) must.
  pdl_wait();
  for (int buf = 0; g < n_groups; g += gridDim.x * WPB, buf ^= 1) {
    // In its last group a block lets the next launch (a mat-vec of another type, say) start
    // fetching its own weights.
    if (g + gridDim.x * WPB >= n_groups) pdl_trigger();
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
    const int64_t next = g + gridDim.x * WPB;
    for (int i = 0; i < n_iter; ++i) {
      const int p = tid + i * TB;
      W nxt[R];
      if (i + 1 < n_iter) {
        load_pieces<Q, R>(wrow, wend, p + TB, n_pieces, nxt);
      } else if (next < n_groups) {
        group_rows(jb, next, total, row_bytes, wrow, wend);
        load_pieces<Q, R>(wrow, wend, tid, n_pieces, nxt);
      }
      if (p < n_pieces) {
        const int b = p / Q::ppb, k = p % Q::ppb;
        typename Q::dec w[R];
#pragma unroll
        for (int r = 0; r < R; ++r) w[r] = Q::decode(cur[r], k);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t >= n_tok) break;
          const typename Q::xpiece xp = Q::load_x(xs, t, b, k);
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r][t] += Q::dot(w[r], xp);
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) cur[r] = nxt[r];
    }

    // part[buf] alternates: the one __syncthreads per group also orders group g's reads of a
    // buffer before group g + 2's writes to it. One warp needs neither: after the butterfly
    // every lane holds every sum, and lane r NT + t writes sum (r, t).
    float mine = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        float v = acc[r][t];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (k_warps == 1 && (lane == r * NT + t || (Pairs && lane + 1 == r * NT + t))) mine += v;
        if (k_warps > 1 && lane == 0) part[buf][warp][r * NT + t] = v;
      }
    if (k_warps > 1) __syncthreads();
    if (tid < R * NT) {
      const int r = tid / NT, t = tid % NT;
      if (t < n_tok && (!Pairs || t % 2 == 0) && g * R + r < total) {
        float v = mine;
        if (k_warps > 1) {
#pragma unroll
          for (int w = 0; w < k_warps; ++w) v += part[buf][w][threadIdx.x] + (Pairs ? part[buf][w][threadIdx.x + 1] : 0.f);
        }
        const located l = locate(jb, g * R + r);
        float* out = l.y + static_cast<int64_t>(Pairs ? t / 2 : t) * l.n_out + l.local;
        *out = add ? *out + v : v;
      }
    }
  }
}

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

struct device_facts {
  int resident = 0;  // thread blocks of the kernel that fit on the device at once
  bool pdl = false;  // programmatic dependent launch (sm_90+)
};

// The kernel's resident blocks (cached per device and kernel) and whether it may launch early.
template <class Q, int NT, int R, int TB, bool Pairs, int W = 1>
cudaError_t facts_of(device_facts& f) {
  f.pdl = kernel_arch() >= 90;
  return resident_blocks<matvec_kernel<Q, NT, R, TB, Pairs, W>, TB * W>(f.resident);
}

// W walkers of one row group each per block (TB == 32), as many blocks as fit (or one walker per
// group, to measure). On sm_90 the kernel starts as a programmatic dependent of the previous
// launch on the stream (its first weight loads overlap that kernel's tail; it waits before
// reading x or touching y).
template <class Q, int NT, int R, int TB, bool Pairs, int W>
cudaError_t launch_rows_w(const jobs& jb, int n_blocks, x_view xs, int n_tok, bool add, cudaStream_t s) {
  const auto kernel = matvec_kernel<Q, NT, R, TB, Pairs, W>;
  device_facts f;
  const cudaError_t e = facts_of<Q, NT, R, TB, Pairs, W>(f);
  if (e != cudaSuccess) return e;
  const int64_t groups = (jb.row_end[jb.n - 1] + R - 1) / R;
  const int64_t blocks = (groups + W - 1) / W;
  const auto grid = static_cast<unsigned>(g_tuning.block_per_group ? std::min<int64_t>(blocks, 0x7fffffff)
                                                                     : std::min<int64_t>(blocks, f.resident));
  const int64_t row_bytes = static_cast<int64_t>(n_blocks) * sizeof(typename Q::block);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(TB * W);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  if (f.pdl && pdl_supported() && !g_tuning.no_pdl) cfg.attrs = attr, cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, jb, n_blocks, row_bytes, xs, n_tok, add);
}

// Block shape per type, measured on an H200. threads: one warp per row group (no shared memory,
// no __syncthreads, each warp on its own rows) beat four warps sharing a group by 5-30% for the
// int8-x types; F32/F16 and Q6_K keep four. one_token_warps: for one token, one-warp row groups
// run that many to a block (independent warps) where it measured faster in the model (tg128,
// Qwen3-8B shapes): Q4_0 +2.8%, Q8_0 +2.4%, Q4_K +0.4%; Q5_K lost 0.5%, and every type lost
// 12-18% at 8 tokens (ptxas allocates registers differently for the 128-thread blocks).
struct block_shape {
  int threads, one_token_warps;
};
template <class Q>
constexpr block_shape shape_of() {
  using std::is_same_v;
  if constexpr (is_same_v<Q, mq_f32> || is_same_v<Q, mq_f16> || is_same_v<Q, mq_q6_k>) return {128, 1};
  if constexpr (is_same_v<Q, mq_q4_0> || is_same_v<Q, mq_q8_0> || is_same_v<Q, mq_q4_k>) return {32, 4};
  return {32, 1};
}

template <class Q, int NT, int R, int TB, bool Pairs = false>
cudaError_t launch_rows(const jobs& jb, int n_blocks, x_view xs, int n_tok, bool add, cudaStream_t s) {
  // Q6_K rows of at most 64 pieces (n_in <= 2048: a 2048-wide model's head and V, a shared
  // expert's down) would leave a 128-thread group's threads half idle or more, with one piece each
  // in flight: one warp a group walks them instead.
  if constexpr (TB == 128 && std::is_same_v<Q, mq_q6_k>)
    if (n_blocks * Q::ppb <= 64 && !g_tuning.wide_short_rows) return launch_rows<Q, NT, R, 32, Pairs>(jb, n_blocks, xs, n_tok, add, s);
  // One token's F32 rows of 512+ pieces (an MoE router: 128-256 rows of 2048 floats, 4.6-4.9 us
  // whether 1 or 2 MB, so latency-bound) on 128 threads wait on a load four times or more: 512
  // threads issue a row's loads at once.
  if constexpr (TB == 128 && NT == 1 && std::is_same_v<Q, mq_f32>)
    if (n_blocks * Q::ppb >= 512 && !g_tuning.narrow_f32_rows) return launch_rows<Q, NT, R, 512, Pairs>(jb, n_blocks, xs, n_tok, add, s);
  constexpr int W = TB == 32 && NT == 1 && !Pairs ? shape_of<Q>().one_token_warps : 1;
  return launch_rows_w<Q, NT, R, TB, Pairs, W>(jb, n_blocks, xs, n_tok, add, s);
}

// Rows per group, measured per type on an H200 (kernels_matvec_test big.matvec_bandwidth): more
// rows share each x load and keep more weight bytes in flight per thread, but cost registers
// (occupancy). Fewer when a matrix has too few rows to give the resident blocks work.
struct rows_choice {
  int one_token;  // for 1 token
  int tokens;     // for 2..8 tokens
};

template <class Q, int NT>
cudaError_t launch_nt(const jobs& jb, int n_blocks, x_view xs, int n_tok, bool add, rows_choice rc,
                      cudaStream_t s) {
  int R = g_tuning.rows_per_block;
  if (R == 0) {
    R = NT == 1 ? rc.one_token : rc.tokens;
    while (R > 1 && jb.row_end[jb.n - 1] / R < 1024) R /= 2;
  }
  constexpr int TB = shape_of<Q>().threads;
  if (R == 4) return launch_rows<Q, NT, 4, TB>(jb, n_blocks, xs, n_tok, add, s);
  if (R == 2) return launch_rows<Q, NT, 2, TB>(jb, n_blocks, xs, n_tok, add, s);
  return launch_rows<Q, NT, 1, TB>(jb, n_blocks, xs, n_tok, add, s);
}

jobs make_jobs(const matvec_job* const* outs, int n_outs) {
  jobs jb;
  int64_t rows = 0;
  for (int i = 0; i < n_outs; ++i) {
    if (outs[i]->n_out == 0) continue;
    jb.w[jb.n] = static_cast<const uint8_t*>(outs[i]->w);
    jb.y[jb.n] = outs[i]->y;
    jb.n_out[jb.n] = outs[i]->n_out;
    jb.row_end[jb.n++] = rows += outs[i]->n_out;
  }
  return jb;
}

// One launch over the jobs of type Q (x already quantized into xs where Q reads int8).
template <class Q>
cudaError_t launch_type(int64_t n_in, const matvec_job* const* outs, int n_outs, x_view xs, int n_tok, bool add,
                        rows_choice rc, cudaStream_t s) {
  if (n_in % Q::qk != 0 || n_in / Q::qk > (1 << 24)) return cudaErrorInvalidValue;
  const jobs jb = make_jobs(outs, n_outs);
  if (jb.n == 0) return cudaSuccess;
  const int nb = static_cast<int>(n_in / Q::qk);
  if (n_tok <= 1) return launch_nt<Q, 1>(jb, nb, xs, n_tok, add, rc, s);
  if (n_tok <= 2) return launch_nt<Q, 2>(jb, nb, xs, n_tok, add, rc, s);
  if (n_tok <= 4) return launch_nt<Q, 4>(jb, nb, xs, n_tok, add, rc, s);
  return launch_nt<Q, 8>(jb, nb, xs, n_tok, add, rc, s);
}

cudaError_t launch_of_type(ggml_type t, int64_t n_in, const matvec_job* const* outs, int n_outs, x_view xs,
                           int n_tok, bool add, cudaStream_t s) {
  const auto a = [&](auto q, rows_choice rc) {
    return launch_type<decltype(q)>(n_in, outs, n_outs, xs, n_tok, add, rc, s);
  };
  switch (t) {
    case ggml_type::f32: return a(mq_f32{}, {2, 4});
    case ggml_type::f16: return a(mq_f16{}, {4, 4});
    case ggml_type::q4_0: return a(mq_q4_0{}, {2, 4});
    case ggml_type::q4_1: return a(mq_q4_1{}, {2, 4});
    case ggml_type::q5_0: return a(mq_q5_0{}, {2, 4});
    case ggml_type::q5_1: return a(mq_q5_1{}, {1, 2});
    case ggml_type::q8_0: return a(mq_q8_0{}, {2, 4});
    case ggml_type::q4_k: return a(mq_q4_k{}, {4, 4});
    case ggml_type::q5_k: return a(mq_q5_k{}, {4, 4});
    case ggml_type::q6_k: return a(mq_q6_k{}, {2, 4});
    default: break;
  }
  return cudaErrorInvalidValue;
}

bool reads_int8_x(ggml_type t) { return t != ggml_type::f32 && t != ggml_type::f16; }

// A quantized type against float x (fx<Q>): only one token (two rows per group: each x load
// serves both) and 2..8 tokens (one row) are built, to keep the number of kernels down.
template <class Q>
cudaError_t launch_float_x(int64_t n_in, const matvec_job& job, x_view xs, int n_tok, cudaStream_t s) {
  if (n_in % Q::qk != 0 || n_in / Q::qk > (1 << 24)) return cudaErrorInvalidValue;
  const matvec_job* one = &job;
  const jobs jb = make_jobs(&one, 1);
  if (jb.n == 0) return cudaSuccess;
  const int nb = static_cast<int>(n_in / Q::qk);
  if (n_tok <= 1) return launch_rows<fx<Q>, 1, 2, 128>(jb, nb, xs, n_tok, false, s);
  return launch_rows<fx<Q>, 8, 1, 128>(jb, nb, xs, n_tok, false, s);
}

// x's int8 copy and its residual's (quantize_x2_kernel) for n_tok <= 4 tokens: 2 or 8 rows in
// pairs, four rows per group for the eight (as the batched mat-vecs measure best).
template <class Q>
cudaError_t launch_fine(int64_t n_in, const matvec_job& job, x_view xs, int n_tok, cudaStream_t s) {
  const matvec_job* one = &job;
  const jobs jb = make_jobs(&one, 1);
  if (jb.n == 0) return cudaSuccess;
  const int nb = static_cast<int>(n_in / Q::qk);
  constexpr int TB = shape_of<Q>().threads;
  if (n_tok <= 1) return launch_rows<Q, 2, 2, TB, true>(jb, nb, xs, 2 * n_tok, false, s);
  return launch_rows<Q, 8, 4, TB, true>(jb, nb, xs, 2 * n_tok, false, s);
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

size_t matvec_work_bytes(int64_t n_in, int n_tok) {
  if (n_in <= 0 || n_tok <= 0) return 0;
  const auto qx = static_cast<size_t>((n_in * n_tok + 15) / 16 * 16);
  return qx + static_cast<size_t>((n_in + 31) / 32 * n_tok) * sizeof(float2);
}

void matvec_set_tuning(const matvec_tuning& t) {
  g_tuning = t;
  if (t.rows_per_block != 1 && t.rows_per_block != 2 && t.rows_per_block != 4) g_tuning.rows_per_block = 0;
}

matvec_qx matvec_x_parts(void* work, int64_t n_in, int n_tok) {
  auto* q = static_cast<int8_t*>(work);
  return {q, reinterpret_cast<float2*>(q + (n_in * n_tok + 15) / 16 * 16)};
}

cudaError_t launch_matvec_jobs(int64_t n_in, const matvec_job* js, int n_jobs, const float* x, bool x_quantized,
                               int n_tok, bool add, void* work, cudaStream_t stream) {
  if (n_in <= 0 || n_in % 32 != 0 || n_tok < 0 || n_tok > k_matvec_max_tokens || n_jobs < 0 ||
      n_jobs > k_matvec_max_outputs)
    return cudaErrorInvalidValue;
  if (n_tok == 0 || n_jobs == 0) return cudaSuccess;
  bool int8 = false, floats = false;
  for (int i = 0; i < n_jobs; ++i) {
    if (!gpu_can_matvec(js[i].type) || js[i].n_out < 0) return cudaErrorInvalidValue;
    if (!aligned(js[i].w, 16)) return cudaErrorMisalignedAddress;
    (reads_int8_x(js[i].type) ? int8 : floats) = true;
  }
  if (floats && !aligned(x, 16)) return cudaErrorMisalignedAddress;
  x_view xs{x, nullptr, nullptr, n_in};
  if (int8) {
    if (work == nullptr) return cudaErrorInvalidValue;
    if (!aligned(work, 16)) return cudaErrorMisalignedAddress;
    if (!x_quantized && !aligned(x, 16)) return cudaErrorMisalignedAddress;
    const matvec_qx qx = matvec_x_parts(work, n_in, n_tok);
    if (!x_quantized) {
      const int64_t n_xb = n_in / 32 * n_tok;
      const cudaError_t e = launch_pdl(quantize_x_kernel, dim3(static_cast<unsigned>((n_xb + 7) / 8)), dim3(256),
                                       stream, x, n_xb, qx.q, qx.ds);
      if (e != cudaSuccess) return e;
    }
    xs.qx = qx.q, xs.ds = qx.ds;
  }
  // Jobs of one type share a launch (in the order their type first appears).
  bool done[k_matvec_max_outputs] = {};
  for (int i = 0; i < n_jobs; ++i) {
    if (done[i]) continue;
    const matvec_job* group[k_matvec_max_outputs];
    int n = 0;
    for (int j = i; j < n_jobs; ++j)
      if (!done[j] && js[j].type == js[i].type) group[n++] = &js[j], done[j] = true;
    const cudaError_t e = launch_of_type(js[i].type, n_in, group, n, xs, n_tok, add, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t launch_matvec_multi(ggml_type t, int64_t n_in, const matvec_output* outs, int n_outs, const float* x,
                                int n_tok, bool add, void* work, cudaStream_t stream) {
  if (n_outs < 0 || n_outs > k_matvec_max_outputs) return cudaErrorInvalidValue;
  matvec_job js[k_matvec_max_outputs];
  for (int i = 0; i < n_outs; ++i) js[i] = {t, outs[i].w, outs[i].n_out, outs[i].y};
  return launch_matvec_jobs(n_in, js, n_outs, x, false, n_tok, add, work, stream);
}

cudaError_t launch_matvec_float_x(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const float* x, int n_tok,
                                  float* y, cudaStream_t stream) {
  if (n_in <= 0 || n_in % 32 != 0 || n_out < 0 || n_tok < 0 || n_tok > k_matvec_max_tokens)
    return cudaErrorInvalidValue;
  if (!gpu_can_matvec(t)) return cudaErrorInvalidValue;
  if (!aligned(w, 16) || !aligned(x, 16)) return cudaErrorMisalignedAddress;
  if (n_tok == 0) return cudaSuccess;
  if (!reads_int8_x(t)) return launch_matvec(t, w, n_in, n_out, x, n_tok, y, nullptr, stream);  // F32/F16: floats
  const matvec_job job{t, w, n_out, y};
  const x_view xs{x, nullptr, nullptr, n_in};
  return with_int8_type(t, [&](auto q) { return launch_float_x<decltype(q)>(n_in, job, xs, n_tok, stream); });
}

cudaError_t launch_matvec_fine_x(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const float* x, int n_tok,
                                 float* y, void* work, cudaStream_t stream) {
  if (n_in <= 0 || n_in % 32 != 0 || n_out < 0 || n_tok < 0 || 2 * n_tok > k_matvec_max_tokens)
    return cudaErrorInvalidValue;
  if (!gpu_can_matvec(t)) return cudaErrorInvalidValue;
  if (!reads_int8_x(t)) return launch_matvec(t, w, n_in, n_out, x, n_tok, y, work, stream);
  if (work == nullptr) return cudaErrorInvalidValue;
  if (!aligned(w, 16) || !aligned(x, 16) || !aligned(work, 16)) return cudaErrorMisalignedAddress;
  return with_int8_type(t, [&](auto q) {
    using Q = decltype(q);
    // Checked before the quantization launch: a refused call launches nothing.
    if (n_in % Q::qk != 0 || n_in / Q::qk > (1 << 24)) return cudaErrorInvalidValue;
    if (n_tok == 0) return cudaSuccess;
    const matvec_qx qx = matvec_x_parts(work, n_in, 2 * n_tok);
    const int64_t n_xb = n_in / 32 * n_tok;
    const cudaError_t e = launch_pdl(quantize_x2_kernel, dim3(static_cast<unsigned>((n_xb + 7) / 8)), dim3(256),
                                     stream, x, n_in, n_xb, qx.q, qx.ds);
    if (e != cudaSuccess) return e;
    return launch_fine<Q>(n_in, {t, w, n_out, y}, {x, qx.q, qx.ds, n_in}, n_tok, stream);
  });
}

cudaError_t launch_matvec(ggml_type t, const void* w, int64_t n_in, int64_t n_out, const float* x, int n_tok,
                          float* y, void* work, cudaStream_t stream) {
  if (n_out < 0) return cudaErrorInvalidValue;
  const matvec_output o{w, n_out, y};
  return launch_matvec_multi(t, n_in, &o, 1, x, n_tok, false, work, stream);
}

}  // namespace tandem
