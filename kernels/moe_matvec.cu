// The mixture-of-experts decode mat-vec over each token's selected experts (kernels/moe.h), the
// mat-vec's per-type pieces (matvec_types.cuh) with the expert ids read on the device, and its
// form with the SwiGLU in the launch.
#include "kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "kernels/device_attribute.h"
#include "kernels/matvec.h"
#include "kernels/matvec_types.cuh"
#include "kernels/matvec_x.cuh"
#include "kernels/pdl.cuh"

namespace tandem {
namespace {

using namespace mv;

bool aligned(const void* p, uintptr_t to) { return reinterpret_cast<uintptr_t>(p) % to == 0; }

// One warp per 32-value block of n_rows rows of n_in values at x + r * stride, written compact
// (row r at r * n_in, matvec_x_parts layout).
__global__ void __launch_bounds__(256) moe_quantize_x_kernel(const float* x, int64_t stride, int64_t n_in,
                                                             int64_t n_blocks, int8_t* qx, float2* ds) {
  pdl_wait();
  pdl_trigger();
  const int64_t b = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  if (b >= n_blocks) return;
  const int64_t per_row = n_in / 32, r = b / per_row, j = b % per_row;
  quantize_x_warp(x[r * stride + 32 * j + threadIdx.x % 32], qx + 32 * b, ds + b);
}

// Row group g of a launch: pair p = t * k + j, matrix set m and rows [r0, r0 + R * NS) of n_out
// (NS sub-warps of SW lanes, R rows each). Groups run pair-major.
struct mv_params {
  const uint8_t* w[k_moe_max_outputs];
  float* y[k_moe_max_outputs];
  int n_mats, n_expert, k, n_blocks;
  bool ids_settled;  // ids written before the previous launch let this one in: see launch_moe_matvec_multi
  int64_t stride, n_out, row_bytes, groups_per_mat, n_groups;
  const int32_t* ids;
  x_view xs;         // x floats (xf) and its int8 copy (qx, ds), rows n_in apart in the copy
  int64_t x_stride;  // floats between pair rows of xf; 0: rows by token, n_in apart
};

// The weight rows, their matrix's end, x and output of a group (for one sub-warp).
template <int R>
struct mv_group {
  const uint8_t* wrow[R];
  const uint8_t* wend;
  x_view xv;
  float* y;      // the pair's output row (row 0 of the matrix set's n_out)
  int64_t row0;  // this sub-warp's first row
  bool valid;    // the pair's id is an expert
};

template <int R, int NS>
__device__ __forceinline__ mv_group<R> setup_group(const mv_params& p, int64_t g, int sub) {
  const int64_t pm = g / p.groups_per_mat, rg = g % p.groups_per_mat;
  const int pair = static_cast<int>(pm / p.n_mats), m = static_cast<int>(pm % p.n_mats);
  const int e = __ldg(p.ids + pair);
  mv_group<R> s;
  s.valid = e >= 0 && e < p.n_expert;
  // Constant indices into the parameter arrays (a runtime index would copy them to local memory).
  const uint8_t* base = (m == 0 ? p.w[0] : p.w[1]) + (s.valid ? e : 0) * p.stride;
  s.wend = base + p.n_out * p.row_bytes;
  s.row0 = rg * R * NS + static_cast<int64_t>(sub) * R;
#pragma unroll
  for (int r = 0; r < R; ++r) s.wrow[r] = base + min(s.row0 + r, p.n_out - 1) * p.row_bytes;
  const int64_t xr = p.x_stride == 0 ? pair / p.k : pair;
  s.xv = p.xs;
  s.xv.xf = p.xs.xf + xr * (p.x_stride == 0 ? p.xs.n_in : p.x_stride);
  if (p.xs.qx) s.xv.qx = p.xs.qx + xr * p.xs.n_in, s.xv.ds = p.xs.ds + xr * (p.xs.n_in / 32);
  s.y = (m == 0 ? p.y[0] : p.y[1]) + static_cast<int64_t>(pair) * p.n_out;
  return s;
}

template <class Q, int R>
__device__ __forceinline__ void load_rows(const mv_group<R>& s, int pc, int n_pieces, typename Q::raw (&w)[R]) {
  if (pc >= n_pieces || !s.valid) return;
  const int b = pc / Q::ppb, kk = pc % Q::ppb;
#pragma unroll
  for (int r = 0; r < R; ++r) w[r] = Q::load(s.wrow[r] + static_cast<int64_t>(b) * sizeof(typename Q::block), kk, s.wend);
}

constexpr int k_mv_warps = 4;  // independent warps (walkers) per block

// Each warp walks row groups g = its global warp index, + all warps, ...; its NS = 32 / SW
// sub-warps take R rows each, their SW lanes pieces sl, sl + SW, ... of every row (short rows,
// the down projection's, would leave most of a 32-lane warp idle). As in matvec_kernel, the
// weights of a lane's next pieces (the next group's at a row's end) are loaded before the current
// ones are used. The ids come from an earlier kernel: where it may be the previous one, no
// weight load before pdl_wait; where they are settled, the first group's are.
template <class Q, int R, int SW>
__global__ void __launch_bounds__(32 * k_mv_warps) moe_matvec_kernel(mv_params p) {
  constexpr int NS = 32 / SW;
  using W = typename Q::raw;
  const int lane = threadIdx.x % 32, sub = lane / SW, sl = lane % SW;
  const int n_pieces = p.n_blocks * Q::ppb, n_iter = (n_pieces + SW - 1) / SW;
  const int64_t step = static_cast<int64_t>(gridDim.x) * k_mv_warps;
  int64_t g = static_cast<int64_t>(blockIdx.x) * k_mv_warps + threadIdx.x / 32;
  if (!p.ids_settled) pdl_wait();
  if (g >= p.n_groups) return;
  mv_group<R> s = setup_group<R, NS>(p, g, sub);
  W cur[R];
  load_rows<Q, R>(s, sl, n_pieces, cur);
  if (p.ids_settled) pdl_wait();
  for (; g < p.n_groups; g += step) {
    if (g + step >= p.n_groups) pdl_trigger();
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    const mv_group<R> c = s;
    for (int i = 0; i < n_iter; ++i) {
      const int pc = sl + i * SW;
      W nxt[R];
      if (i + 1 < n_iter) {
        load_rows<Q, R>(c, pc + SW, n_pieces, nxt);
      } else if (g + step < p.n_groups) {
        s = setup_group<R, NS>(p, g + step, sub);
        load_rows<Q, R>(s, sl, n_pieces, nxt);
      }
      if (pc < n_pieces && c.valid) {
        const int b = pc / Q::ppb, kk = pc % Q::ppb;
        const typename Q::xpiece xp = Q::load_x(c.xv, 0, b, kk);
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] += Q::dot(Q::decode(cur[r], kk), xp);
      }
#pragma unroll
      for (int r = 0; r < R; ++r) cur[r] = nxt[r];
    }
    // Butterfly within the SW lanes of a sub-warp; lane sl == r writes row r.
    float mine = 0.f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float v = acc[r];
#pragma unroll
      for (int o = SW / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (sl == r) mine = v;
    }
    if (sl < R && c.row0 + sl < p.n_out) c.y[c.row0 + sl] = c.valid ? mine : __int_as_float(0x7fc00000);
  }
}

// Gate and up with the SwiGLU in the launch (x's int8 copy given). A block takes units of 32 rows
// of one pair, grid-stride, in `passes` passes of its sub-warps, each pass k_swiglu_rows rows of
// each matrix a sub-warp, summed as moe_matvec_kernel sums them (the same lanes, pieces and
// butterfly, so the same bits). Each row's h = silu(g) u goes to shared memory; after a unit's
// last pass, the block's barrier, then warp 0 writes the unit's 32 floats and their int8 block as
// moe_swiglu_q8_kernel would: one launch fewer a layer. The fused forms that counted rows in on a
// device counter after a __threadfence lost, since the fence waits on the weight loads in flight
// (docs/performance-history.md); a barrier does not, so the next pass's loads stay issued.
// A block holds as many warps as ~170 registers a thread leave room for (8: one block an SM;
// 16 spilled at the 128-register cap).
constexpr int k_swiglu_rows = 2;

template <int SW>
struct swiglu_shape {
  static constexpr int NS = 32 / SW, slots = 32 / k_swiglu_rows;  // sub-warps a unit needs
  static constexpr int warps = slots / NS < 8 ? slots / NS : 8, passes = slots / (warps * NS);
  static constexpr int threads = 32 * warps;
};

// A sub-warp's rows of one pass: k_swiglu_rows consecutive rows of gate and of up, kept as one
// row pointer each (rows past n_out do not occur: n_out % 32 == 0) to hold registers down.
struct swiglu_rows {
  const uint8_t* w[2];
  const int8_t* qx;  // the pair's token's int8 x and scales
  const float2* ds;
  int64_t left;  // bytes from w[m] to its matrix's end
  bool valid;
};

template <class Q>
__device__ __forceinline__ void load_pair_rows(const swiglu_rows& s, int64_t row_bytes, int pc, int n_pieces,
                                               typename Q::raw (&w)[2][k_swiglu_rows]) {
  if (pc >= n_pieces || !s.valid) return;
  const int b = pc / Q::ppb, kk = pc % Q::ppb;
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int r = 0; r < k_swiglu_rows; ++r)
      w[m][r] = Q::load(s.w[m] + r * row_bytes + static_cast<int64_t>(b) * sizeof(typename Q::block), kk,
                        s.w[m] + s.left);
}

template <class Q, int SW>
__global__ void __launch_bounds__(swiglu_shape<SW>::threads) moe_matvec_swiglu_kernel(mv_params p, int8_t* qh,
                                                                                       float2* dh) {
  using S = swiglu_shape<SW>;
  constexpr int RH = k_swiglu_rows;
  using W = typename Q::raw;
  __shared__ float hs[2][32];
  const int lane = threadIdx.x % 32, sl = lane % SW, sub = static_cast<int>(threadIdx.x / 32) * S::NS + lane / SW;
  const int n_pieces = p.n_blocks * Q::ppb, n_iter = (n_pieces + SW - 1) / SW;
  const int64_t units_per_pair = p.n_out / 32;
  const int64_t n_q = blockIdx.x < p.n_groups ? ((p.n_groups - 1 - blockIdx.x) / gridDim.x + 1) * S::passes : 0;
  const auto unit_of = [&](int64_t q) { return blockIdx.x + q / S::passes * gridDim.x; };
  const auto setup = [&](int64_t q) {
    const int64_t u = unit_of(q);
    const int pair = static_cast<int>(u / units_per_pair);
    const int64_t row0 = u % units_per_pair * 32 + (q % S::passes * S::warps * S::NS + sub) * RH;
    const int e = __ldg(p.ids + pair);
    swiglu_rows s;
    s.valid = e >= 0 && e < p.n_expert;
    const int64_t at = (s.valid ? e : 0) * p.stride + row0 * p.row_bytes;
    s.w[0] = p.w[0] + at, s.w[1] = p.w[1] + at;
    s.left = (p.n_out - row0) * p.row_bytes;
    const int64_t xr = pair / p.k;
    s.qx = p.xs.qx + xr * p.xs.n_in, s.ds = p.xs.ds + xr * (p.xs.n_in / 32);
    return s;
  };
  pdl_wait();
  if (n_q == 0) return;  // the whole block: the barrier below is never split
  swiglu_rows s = setup(0);
  W cur[2][RH];
  load_pair_rows<Q>(s, p.row_bytes, sl, n_pieces, cur);
  for (int64_t q = 0, buf = 0; q < n_q; ++q) {
    if (q + 1 == n_q) pdl_trigger();
    float acc[2][RH] = {};
    const swiglu_rows c = s;
    const x_view xv{nullptr, c.qx, c.ds, p.xs.n_in};
    for (int i = 0; i < n_iter; ++i) {
      const int pc = sl + i * SW;
      W nxt[2][RH];
      if (i + 1 < n_iter) {
        load_pair_rows<Q>(c, p.row_bytes, pc + SW, n_pieces, nxt);
      } else if (q + 1 < n_q) {
        s = setup(q + 1);
        load_pair_rows<Q>(s, p.row_bytes, sl, n_pieces, nxt);
      }
      if (pc < n_pieces && c.valid) {
        const int b = pc / Q::ppb, kk = pc % Q::ppb;
        const typename Q::xpiece xp = Q::load_x(xv, 0, b, kk);
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
          for (int r = 0; r < RH; ++r) acc[m][r] += Q::dot(Q::decode(cur[m][r], kk), xp);
      }
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int r = 0; r < RH; ++r) cur[m][r] = nxt[m][r];
    }
    // The xor butterfly leaves every lane of the sub-warp with the same sums.
    const int slot = (static_cast<int>(q % S::passes) * S::warps * S::NS + sub) * RH;
#pragma unroll
    for (int r = 0; r < RH; ++r) {
      float g = acc[0][r], v = acc[1][r];
#pragma unroll
      for (int o = SW / 2; o > 0; o >>= 1) g += __shfl_xor_sync(0xffffffffu, g, o), v += __shfl_xor_sync(0xffffffffu, v, o);
      if (!c.valid) g = v = __int_as_float(0x7fc00000);
      if (sl == 0) hs[buf][slot + r] = g / (1.f + expf(-g)) * v;
    }
    if (q % S::passes != S::passes - 1) continue;
    // hs[buf] is whole; warp 0 read hs[buf] of two units back before the previous barrier.
    __syncthreads();
    if (threadIdx.x < 32) {
      const int64_t u = unit_of(q);  // rows 32 u .. of the pair-major h
      const float h = hs[buf][lane];
      p.y[0][32 * u + lane] = h;
      quantize_x_warp(h, qh + 32 * u, dh + u);
    }
    buf ^= 1;
  }
}

// The down projection with the combine in the launch (launch_moe_down_combine). A row group
// is R rows a sub-warp of 8 lanes, four sub-warps: slot s = sub * R + r is pair s % K of row
// row0 + s / K, so a warp holds all K pairs of its R / 2 rows and adds them up itself. The
// walk, loads ahead and butterfly are moe_matvec_kernel's, written out again: one walker of
// lambdas for both changed the mat-vec's code (its Q4_K PTX 932 -> 884 instructions, registers
// +-2) and has not been timed. Two rows a sub-warp for every type:
// Q4_K's four (194 registers, two blocks an SM) ran 1-2% slower in tg128 than two (four blocks).
constexpr int k_dc_lanes = 8, k_dc_subs = 32 / k_dc_lanes, k_dc_rows = 2;
constexpr int k_dc_group_rows = k_dc_subs * k_dc_rows / k_moe_down_combine_k;  // output rows a group

struct dc_params {
  const uint8_t* w;
  int64_t stride, n_out, row_bytes, n_groups;
  int n_blocks, n_expert;
  bool ids_settled;
  const int32_t* ids;
  const float* weights;  // the routing's, K a token
  x_view xs;             // h's int8 copy, one row a pair
  float* out;
  const float* shared_y;  // null: no shared term
  const float* shared_logits;
};

template <int R>
struct dc_group {
  const uint8_t* wrow[R];
  const uint8_t* wend[R];
  int pair[R];
  bool valid[R];
  int t;
  int64_t row0;
};

template <int R>
__device__ __forceinline__ dc_group<R> dc_setup(const dc_params& p, int64_t g, int sub) {
  constexpr int K = k_moe_down_combine_k, RG = k_dc_subs * R / K;
  const int64_t per_tok = p.n_out / RG;
  dc_group<R> c;
  c.t = static_cast<int>(g / per_tok);
  c.row0 = g % per_tok * RG;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int s = sub * R + r;
    c.pair[r] = c.t * K + s % K;
    const int e = __ldg(p.ids + c.pair[r]);
    c.valid[r] = e >= 0 && e < p.n_expert;
    const uint8_t* base = p.w + (c.valid[r] ? e : 0) * p.stride;
    c.wrow[r] = base + (c.row0 + s / K) * p.row_bytes;
    c.wend[r] = base + p.n_out * p.row_bytes;
  }
  return c;
}

template <class Q, int R>
__device__ __forceinline__ void dc_load(const dc_group<R>& c, int pc, int n_pieces, typename Q::raw (&w)[R]) {
  if (pc >= n_pieces) return;
  const int b = pc / Q::ppb, kk = pc % Q::ppb;
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (c.valid[r]) w[r] = Q::load(c.wrow[r] + static_cast<int64_t>(b) * sizeof(typename Q::block), kk, c.wend[r]);
}

template <class Q, int R>
__global__ void __launch_bounds__(32 * k_mv_warps) moe_down_combine_kernel(dc_params p) {
  constexpr int K = k_moe_down_combine_k, SW = k_dc_lanes, S = k_dc_subs * R, RG = S / K;
  static_assert(S % K == 0, "a warp's slots are whole rows");
  using W = typename Q::raw;
  const int lane = threadIdx.x % 32, sub = lane / SW, sl = lane % SW;
  const int n_pieces = p.n_blocks * Q::ppb, n_iter = (n_pieces + SW - 1) / SW;
  const int64_t step = static_cast<int64_t>(gridDim.x) * k_mv_warps;
  int64_t g = static_cast<int64_t>(blockIdx.x) * k_mv_warps + threadIdx.x / 32;
  if (!p.ids_settled) pdl_wait();
  if (g >= p.n_groups) return;
  dc_group<R> s = dc_setup<R>(p, g, sub);
  W cur[R];
  dc_load<Q, R>(s, sl, n_pieces, cur);
  if (p.ids_settled) pdl_wait();
  for (; g < p.n_groups; g += step) {
    if (g + step >= p.n_groups) pdl_trigger();
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    const dc_group<R> c = s;
    for (int i = 0; i < n_iter; ++i) {
      const int pc = sl + i * SW;
      W nxt[R];
      if (i + 1 < n_iter) {
        dc_load<Q, R>(c, pc + SW, n_pieces, nxt);
      } else if (g + step < p.n_groups) {
        s = dc_setup<R>(p, g + step, sub);
        dc_load<Q, R>(s, sl, n_pieces, nxt);
      }
      if (pc < n_pieces) {
        const int b = pc / Q::ppb, kk = pc % Q::ppb;
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (c.valid[r]) acc[r] += Q::dot(Q::decode(cur[r], kk), Q::load_x(p.xs, c.pair[r], b, kk));
      }
#pragma unroll
      for (int r = 0; r < R; ++r) cur[r] = nxt[r];
    }
    float v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      v[r] = acc[r];
#pragma unroll
      for (int o = SW / 2; o > 0; o >>= 1) v[r] += __shfl_xor_sync(0xffffffffu, v[r], o);
      if (!c.valid[r]) v[r] = __int_as_float(0x7fc00000);
    }
    // Every slot's sum to every lane (slot s sits in register s % R of sub-warp s / R); lane q
    // adds up row q's K pairs in pair order, as launch_moe_combine does.
    float sums[S];
#pragma unroll
    for (int q = 0; q < S; ++q) sums[q] = __shfl_sync(0xffffffffu, v[q % R], q / R * SW);
#pragma unroll
    for (int q = 0; q < RG; ++q) {
      if (lane != q) continue;
      const float* wt = p.weights + static_cast<int64_t>(c.t) * K;
      float acc_row = 0.f;
#pragma unroll
      for (int j = 0; j < K; ++j) acc_row = fmaf(__ldg(wt + j), sums[q * K + j], acc_row);
      float* o = p.out + static_cast<int64_t>(c.t) * p.n_out + c.row0 + q;
      float r = *o + acc_row;
      if (p.shared_y) {
        const float gate = 1.f / (1.f + expf(-p.shared_logits[c.t]));
        r += __fmul_rn(gate, p.shared_y[static_cast<int64_t>(c.t) * p.n_out + c.row0 + q]);
      }
      *o = r;
    }
  }
}

template <class Q, int R, int SW>
cudaError_t launch_mv(mv_params p, int n_pairs, cudaStream_t s) {
  constexpr int NS = 32 / SW;
  p.groups_per_mat = (p.n_out + R * NS - 1) / (R * NS);
  p.n_groups = p.groups_per_mat * p.n_mats * n_pairs;
  if (p.n_groups == 0) return cudaSuccess;
  int resident = 0;
  const cudaError_t e = resident_blocks<moe_matvec_kernel<Q, R, SW>, 32 * k_mv_warps>(resident);
  if (e != cudaSuccess) return e;
  const int64_t blocks = std::min<int64_t>((p.n_groups + k_mv_warps - 1) / k_mv_warps, resident);
  return launch_pdl(moe_matvec_kernel<Q, R, SW>, dim3(static_cast<unsigned>(blocks)), dim3(32 * k_mv_warps), s, p);
}

// n_groups counts 32-row units here (n_out % 32 == 0); resident: the kernel's blocks that fit at once.
template <class Q, int SW>
cudaError_t launch_mv_swiglu(mv_params p, int n_pairs, int8_t* qh, float2* dh, int resident, cudaStream_t s) {
  p.n_groups = p.n_out / 32 * n_pairs;
  if (p.n_groups == 0) return cudaSuccess;
  constexpr auto kernel = moe_matvec_swiglu_kernel<Q, SW>;
  const int64_t blocks = std::min<int64_t>(p.n_groups, resident);
  return launch_pdl(kernel, dim3(static_cast<unsigned>(blocks)), dim3(swiglu_shape<SW>::threads), s, p, qh, dh);
}

// TANDEM_MOE_SWIGLU_ANY_WAVES=1: the fused launch even where its units outnumber its resident
// blocks (read at every launch, so that one run can time both).
bool swiglu_any_waves() {
  const char* e = std::getenv("TANDEM_MOE_SWIGLU_ANY_WAVES");
  return e && e[0] == '1' && e[1] == 0;
}

// Rows per sub-warp: matvec's one-token choices (measured there on an H200).
template <class Q>
constexpr int rows_of() {
  using std::is_same_v;
  if constexpr (is_same_v<Q, mq_q4_k> || is_same_v<Q, mq_q5_k> || is_same_v<Q, mq_f16>) return 4;
  if constexpr (is_same_v<Q, mq_q5_1>) return 1;
  return 2;
}

// f(std::integral_constant<int, SW>) for the sub-warp width: the fewest lanes (8, 16 or 32) that
// take every piece of a row in one pass. Both launches take it, so their sums match.
template <class F>
cudaError_t by_width(int64_t pieces, F&& f) {
  if (pieces <= 8) return f(std::integral_constant<int, 8>{});
  if (pieces <= 16) return f(std::integral_constant<int, 16>{});
  return f(std::integral_constant<int, 32>{});
}

// Row sizes for type Q and n_in inputs; returns the pieces of a row.
template <class Q>
int64_t size_rows(int& n_blocks, int64_t& row_bytes, int64_t n_in) {
  n_blocks = static_cast<int>(n_in / Q::qk);
  row_bytes = static_cast<int64_t>(n_blocks) * sizeof(typename Q::block);
  return static_cast<int64_t>(n_blocks) * Q::ppb;
}
template <class Q>
int64_t size_rows(mv_params& p, int64_t n_in) {
  return size_rows<Q>(p.n_blocks, p.row_bytes, n_in);
}

// f(mq type{}) for t, cudaErrorInvalidValue for a type without a mat-vec.
template <class F>
cudaError_t by_mq_type(ggml_type t, F&& f) {
  if (t == ggml_type::f32) return f(mq_f32{});
  if (t == ggml_type::f16) return f(mq_f16{});
  return with_int8_type(t, f);
}

cudaError_t launch_mv_of(ggml_type t, mv_params p, int64_t n_in, int n_pairs, cudaStream_t s) {
  return by_mq_type(t, [&](auto q) {
    using Q = decltype(q);
    return by_width(size_rows<Q>(p, n_in), [&](auto sw) { return launch_mv<Q, rows_of<Q>(), decltype(sw)::value>(p, n_pairs, s); });
  });
}

// TANDEM_MOE_SETTLED_IDS=0: every expert mat-vec waits before its first weight load (read at
// every launch, so that one run can time both).
bool settled_off() {
  const char* e = std::getenv("TANDEM_MOE_SETTLED_IDS");
  return e && e[0] == '0' && e[1] == 0;
}

bool reads_int8_x(ggml_type t) { return t != ggml_type::f32 && t != ggml_type::f16; }

// The checks both decode launches share: cudaSuccess when the arguments are valid.
cudaError_t check_matvec_args(ggml_type t, const moe_matvec_output* outs, int n_outs, size_t expert_stride_bytes,
                              int n_expert, int64_t n_in, int64_t n_out, int64_t x_stride, int n_tok, int k,
                              const int32_t* ids) {
  if (!gpu_can_moe_matvec(t) || n_outs < 1 || n_outs > k_moe_max_outputs || n_expert < 1 || n_in <= 0 ||
      n_in % 32 != 0 || n_out < 0 || n_tok < 0 || n_tok > k_moe_matvec_max_tokens || k < 1 || k > k_moe_max_k ||
      (x_stride != 0 && x_stride < n_in) || x_stride % 4 != 0 || ids == nullptr ||
      n_in % type_info(t).block_size != 0 || n_in / type_info(t).block_size > (1 << 24))
    return cudaErrorInvalidValue;
  for (int i = 0; i < n_outs; ++i) {
    if (outs[i].w == nullptr || outs[i].y == nullptr) return cudaErrorInvalidValue;
    if (!aligned(outs[i].w, 16)) return cudaErrorMisalignedAddress;
  }
  return expert_stride_bytes % 16 != 0 ? cudaErrorMisalignedAddress : cudaSuccess;
}

mv_params matvec_params(const moe_matvec_output* outs, int n_outs, size_t expert_stride_bytes, int n_expert,
                        int64_t n_in, int64_t n_out, const float* x, int64_t x_stride, int k, const int32_t* ids) {
  mv_params p{};
  for (int i = 0; i < n_outs; ++i) p.w[i] = static_cast<const uint8_t*>(outs[i].w), p.y[i] = outs[i].y;
  p.n_mats = n_outs, p.n_expert = n_expert, p.k = k;
  p.stride = static_cast<int64_t>(expert_stride_bytes), p.n_out = n_out;
  p.ids = ids;
  p.xs = {x, nullptr, nullptr, n_in};
  p.x_stride = x_stride;
  return p;
}

}  // namespace

bool gpu_can_moe_matvec(ggml_type t) { return gpu_can_matvec(t); }

size_t moe_matvec_work_bytes(int64_t n_in, int n_x_rows) { return matvec_work_bytes(n_in, n_x_rows); }

cudaError_t launch_moe_matvec_multi(ggml_type t, const moe_matvec_output* outs, int n_outs,
                                    size_t expert_stride_bytes, int n_expert, int64_t n_in, int64_t n_out,
                                    const float* x, int64_t x_stride, bool x_quantized, int n_tok, int k,
                                    const int32_t* ids, void* work, cudaStream_t stream, bool ids_settled) {
  cudaError_t e = check_matvec_args(t, outs, n_outs, expert_stride_bytes, n_expert, n_in, n_out, x_stride, n_tok, k, ids);
  if (e != cudaSuccess) return e;
  const bool int8 = reads_int8_x(t);
  if ((!int8 || !x_quantized) && !aligned(x, 16)) return cudaErrorMisalignedAddress;
  if (int8 && work == nullptr) return cudaErrorInvalidValue;
  if (int8 && !aligned(work, 16)) return cudaErrorMisalignedAddress;
  if (n_tok == 0 || n_out == 0) return cudaSuccess;
  const int n_pairs = n_tok * k, n_x_rows = x_stride == 0 ? n_tok : n_pairs;
  mv_params p = matvec_params(outs, n_outs, expert_stride_bytes, n_expert, n_in, n_out, x, x_stride, k, ids);
  p.ids_settled = ids_settled && !settled_off();
  if (int8) {
    const matvec_qx qx = matvec_x_parts(work, n_in, n_x_rows);
    p.xs.qx = qx.q, p.xs.ds = qx.ds;
    if (!x_quantized) {
      const int64_t n_xb = n_in / 32 * n_x_rows;
      e = launch_pdl(moe_quantize_x_kernel, dim3(static_cast<unsigned>((n_xb + 7) / 8)), dim3(256), stream, x,
                     x_stride == 0 ? n_in : x_stride, n_in, n_xb, qx.q, qx.ds);
      if (e != cudaSuccess) return e;
    }
  }
  return launch_mv_of(t, p, n_in, n_pairs, stream);
}

bool gpu_can_moe_matvec_swiglu(ggml_type t, int64_t n_out) {
  return gpu_can_moe_matvec(t) && reads_int8_x(t) && n_out > 0 && n_out % 32 == 0;
}

cudaError_t launch_moe_matvec_swiglu(ggml_type t, const moe_matvec_output* gate_up, size_t expert_stride_bytes,
                                     int n_expert, int64_t n_in, int64_t n_out, const void* x_work, int n_tok, int k,
                                     const int32_t* ids, void* h_work, cudaStream_t stream) {
  if (!gpu_can_moe_matvec_swiglu(t, n_out) || !x_work || !h_work) return cudaErrorInvalidValue;
  const cudaError_t e =
      check_matvec_args(t, gate_up, 2, expert_stride_bytes, n_expert, n_in, n_out, 0, n_tok, k, ids);
  if (e != cudaSuccess) return e;
  if (!aligned(x_work, 16) || !aligned(h_work, 16)) return cudaErrorMisalignedAddress;
  if (n_tok == 0) return cudaSuccess;
  mv_params p = matvec_params(gate_up, 2, expert_stride_bytes, n_expert, n_in, n_out, nullptr, 0, k, ids);
  const matvec_qx qx = matvec_x_parts(const_cast<void*>(x_work), n_in, n_tok), qh = matvec_x_parts(h_work, n_out, n_tok * k);
  p.xs.qx = qx.q, p.xs.ds = qx.ds;
  return by_mq_type(t, [&](auto q) {
    using Q = decltype(q);
    if constexpr (std::is_same_v<Q, mq_f32> || std::is_same_v<Q, mq_f16>) {
      return cudaErrorInvalidValue;  // float x: gpu_can_moe_matvec_swiglu said no
    } else {
      return by_width(size_rows<Q>(p, n_in), [&](auto sw) {
        constexpr int SW = decltype(sw)::value;
        int resident = 0;
        const cudaError_t r =
            resident_blocks<moe_matvec_swiglu_kernel<Q, SW>, swiglu_shape<SW>::threads>(resident);
        if (r != cudaSuccess) return r;
        const int n_pairs = n_tok * k;
        if (n_out / 32 * n_pairs <= resident || swiglu_any_waves())
          return launch_mv_swiglu<Q, SW>(p, n_pairs, qh.q, qh.ds, resident, stream);
        // A second wave of fused blocks would double the passes on the critical path: the two
        // launches instead (the same bits).
        const cudaError_t m = launch_mv<Q, rows_of<Q>(), SW>(p, n_pairs, stream);
        if (m != cudaSuccess) return m;
        return launch_moe_swiglu_q8(gate_up[0].y, gate_up[1].y, gate_up[0].y, n_pairs, static_cast<int>(n_out), h_work,
                                    stream);
      });
    }
  });
}

bool gpu_can_moe_down_combine(ggml_type t, int64_t n_in, int64_t n_out, int k) {
  return gpu_can_moe_matvec(t) && reads_int8_x(t) && k == k_moe_down_combine_k && n_in > 0 && n_in % 32 == 0 &&
         n_in % type_info(t).block_size == 0 && n_in / type_info(t).block_size <= (1 << 24) && n_out > 0 &&
         n_out % k_dc_group_rows == 0;
}

cudaError_t launch_moe_down_combine(ggml_type t, const void* w, size_t expert_stride_bytes, int n_expert,
                                    int64_t n_in, int64_t n_out, const void* x_work, int n_tok, int k,
                                    const int32_t* ids, const float* weights, float* out,
                                    const moe_shared_term* shared, cudaStream_t stream, bool ids_settled) {
  if (!gpu_can_moe_down_combine(t, n_in, n_out, k) || n_expert < 1 || n_tok < 0 ||
      n_tok > k_moe_matvec_max_tokens || !w || !x_work || !ids || !weights || !out ||
      (shared && (!shared->y || !shared->gate_logits)))
    return cudaErrorInvalidValue;
  if (!aligned(w, 16) || !aligned(x_work, 16) || expert_stride_bytes % 16 != 0) return cudaErrorMisalignedAddress;
  if (n_tok == 0) return cudaSuccess;
  dc_params p{};
  p.w = static_cast<const uint8_t*>(w);
  p.stride = static_cast<int64_t>(expert_stride_bytes), p.n_out = n_out, p.n_expert = n_expert;
  p.ids_settled = ids_settled && !settled_off();
  p.ids = ids, p.weights = weights, p.out = out;
  p.shared_y = shared ? shared->y : nullptr, p.shared_logits = shared ? shared->gate_logits : nullptr;
  const matvec_qx qx = matvec_x_parts(const_cast<void*>(x_work), n_in, n_tok * k);
  p.xs = {nullptr, qx.q, qx.ds, n_in};
  return with_int8_type(t, [&](auto q) {
    using Q = decltype(q);
    size_rows<Q>(p.n_blocks, p.row_bytes, n_in);
    p.n_groups = n_tok * (n_out / k_dc_group_rows);
    int resident = 0;
    const cudaError_t e = resident_blocks<moe_down_combine_kernel<Q, k_dc_rows>, 32 * k_mv_warps>(resident);
    if (e != cudaSuccess) return e;
    const int64_t blocks = std::min<int64_t>((p.n_groups + k_mv_warps - 1) / k_mv_warps, resident);
    return launch_pdl(moe_down_combine_kernel<Q, k_dc_rows>, dim3(static_cast<unsigned>(blocks)),
                      dim3(32 * k_mv_warps), stream, p);
  });
}

cudaError_t launch_moe_matvec(ggml_type t, const void* w, size_t expert_stride_bytes, int n_expert, int64_t n_in,
                              int64_t n_out, const float* x, int64_t x_stride, int n_tok, int k, const int32_t* ids,
                              float* y, void* work, cudaStream_t stream) {
  const moe_matvec_output o{w, y};
  return launch_moe_matvec_multi(t, &o, 1, expert_stride_bytes, n_expert, n_in, n_out, x, x_stride, false, n_tok, k,
                                 ids, work, stream);
}

}  // namespace tandem
