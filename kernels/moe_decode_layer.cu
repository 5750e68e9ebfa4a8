// The mixture-of-experts half of a decode layer for one token as one persistent, cooperative launch
// (kernels/moe_decode_layer.h): four phases split by grid barriers, each phase's weights asked
// into L2 as soon as their addresses are known, so that no phase starts with a trip to HBM that
// it could have begun earlier. The launch chain it replaces pays, per dependent launch, the
// launch gap and then its own weights' latency (docs/PERFORMANCE.md, "Decode").
#include "kernels/moe_decode_layer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "kernels/arch.h"
#include "kernels/device_attribute.h"
#include "kernels/grid_sync.cuh"
#include "kernels/matvec.h"
#include "kernels/matvec_fx.cuh"
#include "kernels/matvec_types.cuh"
#include "kernels/moe_route.cuh"
#include "kernels/norm_rows.cuh"
#include "kernels/pdl.cuh"

namespace tandem {
namespace {

using namespace mv;

constexpr int k_threads = norm::k_threads;  // the folded norm's tail takes the norm kernel's block
constexpr int k_warps = k_threads / 32;
constexpr int k_pl = 2;  // gate/up pieces a lane holds: rows of up to 64 pieces

// The arguments and what the launcher derives from them.
struct dl_params {
  moe_decode_layer_args a;
  int8_t* next_qx;  // the next norm's int8 copy
  float2* next_ds;
  unsigned* bar;   // grid_barrier's word
  unsigned* last;  // grid_last_block's
  float* logits;   // n_expert, then the shared gate's
  float* gu;       // [slot][gate, up][n_ff], then the shared expert's [gate, up][n_ff_shexp]
  bool prefetch;   // ask L2 for each phase's weights ahead (TANDEM_MOE_PERSISTENT_PREFETCH=0: not)
};

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.L2 [%0];" ::"l"(p)); }

// The warp asks L2 for the 128-byte lines of [p, p + bytes).
__device__ __forceinline__ void warp_prefetch(const void* p, int64_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p), end = a + static_cast<uintptr_t>(bytes);
  for (uintptr_t l = (a & ~uintptr_t{127}) + 128u * (threadIdx.x % 32); l < end; l += 32u * 128u)
    prefetch_l2(reinterpret_cast<const void*>(l));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class Q>
__device__ __forceinline__ int64_t row_bytes_of(int64_t n_in) {
  return n_in / Q::qk * static_cast<int64_t>(sizeof(typename Q::block));
}

// row · x over n4 float4s (a float32 router row; x in shared memory): lane l takes float4s l,
// l + 32, ..., eight of the row's loads in flight at a time (a 2048-wide row: two trips). The sum
// on every lane.
__device__ __forceinline__ float float_row_dot(const float* row, const float* x, int n4) {
  constexpr int batch = 8;
  const auto* w4 = reinterpret_cast<const float4*>(row);
  const auto* x4 = reinterpret_cast<const float4*>(x);
  float acc = 0.f;
  for (int c0 = static_cast<int>(threadIdx.x % 32); c0 < n4; c0 += 32 * batch) {
    float4 wv[batch], xv[batch];
#pragma unroll
    for (int i = 0; i < batch; ++i) {
      const int c = c0 + 32 * i;
      const bool in = c < n4;
      wv[i] = in ? __ldg(w4 + c) : make_float4(0.f, 0.f, 0.f, 0.f);
      xv[i] = in ? x4[c] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int i = 0; i < batch; ++i)
      acc = fmaf(wv[i].w, xv[i].w, fmaf(wv[i].z, xv[i].z, fmaf(wv[i].y, xv[i].y, fmaf(wv[i].x, xv[i].x, acc))));
  }
  return warp_sum(acc);
}

// Rows i = first, first + stride, ... < n of type Q (row_of(i): its first byte; rb bytes) dotted
// with one token's int8 x (shared memory): lane l takes pieces l and l + 32 of every row. Each
// row's weights are loaded before the previous row's products. out(i, sum) on lane 0.
template <class Q, class RowOf, class Out>
__device__ __forceinline__ void warp_rows(int64_t first, int64_t n, int64_t stride, int n_pieces, int64_t rb,
                                          const x_view_plain& xv, RowOf row_of, Out out) {
  if (first >= n) return;
  using W = typename Q::raw;
  const int lane = threadIdx.x % 32;
  const auto load = [&](int64_t i, W(&w)[k_pl]) {
    const uint8_t* r = row_of(i);
#pragma unroll
    for (int j = 0; j < k_pl; ++j) {
      const int p = lane + 32 * j;
      if (p < n_pieces) w[j] = Q::load(r + (p / Q::ppb) * sizeof(typename Q::block), p % Q::ppb, r + rb);
    }
  };
  W cur[k_pl];
  load(first, cur);
  for (int64_t i = first; i < n; i += stride) {
    W nxt[k_pl];
    if (i + stride < n) load(i + stride, nxt);
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < k_pl; ++j) {
      const int p = lane + 32 * j;
      if (p < n_pieces) acc += Q::dot(Q::decode(cur[j], p % Q::ppb), Q::load_x(xv, 0, p / Q::ppb, p % Q::ppb));
    }
    acc = warp_sum(acc);
    if (lane == 0) out(i, acc);
#pragma unroll
    for (int j = 0; j < k_pl; ++j) cur[j] = nxt[j];
  }
}

// One (slot, piece) of an output row's down products: slot k is the shared expert's.
struct down_unit {
  const uint8_t* row;
  const uint8_t* end;
  int piece, slot;  // slot < 0: none (the row's units ran out on this lane)
};

// Phase 3: the warp's output rows o = gw, gw + nw, ...: x[o] += sum_j w_j down_j[o] · h_j +
// gate · down_s[o] · h_s, with h (shared memory, floats) in slot order. A row's units (slot j,
// piece) spread over the lanes, upl a lane; each unit's weights are loaded before the previous
// unit's products, across rows too.
template <class D>
__device__ __forceinline__ void down_rows(const dl_params& p, const float* h, const int* ids, const float* w,
                                          float gate, int gw, int nw) {
  const moe_decode_layer_args& a = p.a;
  using W = typename D::raw;
  const int lane = threadIdx.x % 32;
  const int P = static_cast<int>(a.n_ff / D::qk) * D::ppb, Ps = static_cast<int>(a.n_ff_shexp / D::qk) * D::ppb;
  const int routed = a.k * P, n_units = routed + Ps, upl = (n_units + 31) / 32;
  const int64_t rb = row_bytes_of<D>(a.n_ff), rbs = row_bytes_of<D>(a.n_ff_shexp);
  if (gw >= a.n_embd) return;
  const int64_t steps = (a.n_embd - 1 - gw) / nw + 1;
  const int64_t n_steps = steps * upl;
  const auto* down = static_cast<const uint8_t*>(a.down);
  const auto* down_s = static_cast<const uint8_t*>(a.shexp_down);
  const auto unit_of = [&](int64_t q) {
    const int64_t o = gw + q / upl * nw;
    const int u = lane + 32 * static_cast<int>(q % upl);
    down_unit r{nullptr, nullptr, 0, -1};
    if (u < routed) {
      r.slot = u / P, r.piece = u % P;
      r.row = down + static_cast<int64_t>(ids[r.slot]) * static_cast<int64_t>(a.down_stride) + o * rb;
      r.end = r.row + rb;
    } else if (u < n_units) {
      r.slot = a.k, r.piece = u - routed;
      r.row = down_s + o * rbs;
      r.end = r.row + rbs;
    }
    return r;
  };
  const auto load = [](const down_unit& u) {
    return D::load(u.row + (u.piece / D::ppb) * sizeof(typename D::block), u.piece % D::ppb, u.end);
  };
  down_unit c = unit_of(0);
  W cur;
  if (c.slot >= 0) cur = load(c);
  float acc = 0.f, acc_s = 0.f;
  for (int64_t q = 0; q < n_steps; ++q) {
    down_unit nu{nullptr, nullptr, 0, -1};
    W nxt;
    if (q + 1 < n_steps) {
      nu = unit_of(q + 1);
      if (nu.slot >= 0) nxt = load(nu);
    }
    if (c.slot >= 0) {
      const int b = c.piece / D::ppb, kk = c.piece % D::ppb;
      const bool s = c.slot == a.k;
      const x_view_plain xv{h + (s ? a.k : c.slot) * a.n_ff, nullptr, nullptr, s ? a.n_ff_shexp : a.n_ff};
      const float d = D::dot(D::decode(cur, kk), D::load_x(xv, 0, b, kk));
      if (s) {
        acc_s += d;
      } else {
        acc = fmaf(w[c.slot], d, acc);
      }
    }
    if (q % upl == upl - 1) {  // the row's last step, on every lane at once
      const float y = warp_sum(acc), ys = warp_sum(acc_s);
      const int64_t o = gw + q / upl * nw;
      if (lane == 0) a.x[o] = a.x[o] + y + gate * ys;
      acc = acc_s = 0.f;
    }
    c = nu;
    cur = nxt;
  }
}

// h = silu(gate) * up (launch_swiglu's arithmetic) of every slot into shared memory: the routed
// experts' k * n_ff, then the shared expert's n_ff_shexp; the products come from other blocks.
__device__ __forceinline__ void swiglu_to_shared(const dl_params& p, float* h) {
  const int64_t F = p.a.n_ff, Fs = p.a.n_ff_shexp, nr = p.a.k * F, n4 = (nr + Fs) / 4;
  auto* h4 = reinterpret_cast<float4*>(h);
  for (int64_t c = threadIdx.x; c < n4; c += k_threads) {
    const int64_t i = 4 * c;
    const float* g = i < nr ? p.gu + i / F * 2 * F + i % F : p.gu + 2 * nr + (i - nr);
    const float* u = g + (i < nr ? F : Fs);
    const float4 gv = __ldcg(reinterpret_cast<const float4*>(g)), uv = __ldcg(reinterpret_cast<const float4*>(u));
    h4[c] = make_float4(gv.x / (1.f + expf(-gv.x)) * uv.x, gv.y / (1.f + expf(-gv.y)) * uv.y,
                        gv.z / (1.f + expf(-gv.z)) * uv.z, gv.w / (1.f + expf(-gv.w)) * uv.w);
  }
}

// Warp 0 routes the token from the logits the grid wrote: ids and weights into shared memory
// (block 0 also into the arguments' arrays) and the shared expert's sigmoid gate.
__device__ __forceinline__ void route_block(const dl_params& p, int* ids, float* w, float* gate) {
  const moe_decode_layer_args& a = p.a;
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  const float* lg = p.logits;
  const auto logit = [lg](int e) { return __ldcg(lg + e); };
  int id = 0;
  float wt = 0.f;
  if (a.n_expert <= 32) {
    route_warp<1>(logit, a.n_expert, a.k, a.renorm, id, wt);
  } else if (a.n_expert <= 64) {
    route_warp<2>(logit, a.n_expert, a.k, a.renorm, id, wt);
  } else if (a.n_expert <= 128) {
    route_warp<4>(logit, a.n_expert, a.k, a.renorm, id, wt);
  } else if (a.n_expert <= 256) {
    route_warp<8>(logit, a.n_expert, a.k, a.renorm, id, wt);
  } else {
    route_warp<16>(logit, a.n_expert, a.k, a.renorm, id, wt);
  }
  if (lane < a.k) {
    ids[lane] = id, w[lane] = wt;
    if (blockIdx.x == 0) a.ids[lane] = id, a.weights[lane] = wt;
  }
  if (lane == 0) *gate = a.n_ff_shexp > 0 ? 1.f / (1.f + expf(-__ldcg(lg + a.n_expert))) : 0.f;
}

// Where every block keeps this layer's FFN norm in shared memory: xn (n_embd floats), then its
// int8 copy (n_embd bytes) and the copy's scales.
struct shared_xn {
  float* xf;
  int8_t* q;
  float2* ds;
};
__device__ __forceinline__ shared_xn shared_layout(float* smem, int64_t n_embd) {
  auto* q = reinterpret_cast<int8_t*>(smem + n_embd);
  return {smem, q, reinterpret_cast<float2*>(q + n_embd)};
}

__device__ __forceinline__ void load_norm_weights(const float* w, int n4, float4 (&wv)[norm::k_chunks]) {
  const auto* w4 = reinterpret_cast<const float4*>(w);
#pragma unroll
  for (int k = 0; k < norm::k_chunks; ++k) {
    const int c = k * k_threads + static_cast<int>(threadIdx.x);
    wv[k] = c < n4 ? __ldg(w4 + c) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// RMSNorm(x) * w of the residual x (read from L2: the previous kernel or other blocks wrote it):
// out and its int8 copy (q, ds) through norm::wide_tail, as launch_rms_norm_q8's wide rows.
__device__ __forceinline__ void norm_x(const float* x, const float4 (&wv)[norm::k_chunks], int n, float eps,
                                       float* out, int8_t* q, float2* ds, float* red) {
  const int n4 = n / 4;
  const auto* x4 = reinterpret_cast<const float4*>(x);
  float4 v[norm::k_chunks];
#pragma unroll
  for (int k = 0; k < norm::k_chunks; ++k) {
    const int c = k * k_threads + static_cast<int>(threadIdx.x);
    v[k] = c < n4 ? __ldcg(x4 + c) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
  norm::wide_tail<true>(v, wv, n, eps, out, q, ds, red);
}

// The next layer's input norm, in the last block to finish: x (all of it, from every block).
__device__ __forceinline__ void next_norm(const dl_params& p, float* red) {
  const moe_decode_layer_args& a = p.a;
  float4 wv[norm::k_chunks];
  load_norm_weights(a.next.w, static_cast<int>(a.n_embd / 4), wv);
  norm_x(a.x, wv, static_cast<int>(a.n_embd), a.next.eps, a.next.xn, p.next_qx, p.next_ds, red);
}

// GU: the int8-x mat-vec pieces of gate/up (matvec_types.cuh); D: the float-x pieces of down
// (matvec_fx.cuh). Phases: (1) the FFN norm in every block, router and shared-gate logits, the
// shared expert's gate and up; (2) routing in every block, then the k experts' gate and up; (3)
// SwiGLU into shared memory (where xn was), then down and the sum into x; (4) the next norm, in
// the last block.
template <class GU, class D>
__global__ void __launch_bounds__(k_threads, 2) moe_decode_layer_kernel(dl_params p) {
  const moe_decode_layer_args& a = p.a;
  // xn and its int8 copy in phases 1 and 2, h in phase 3.
  __shared__ __align__(16) float smem[k_moe_decode_layer_max_h];
  __shared__ int ids[k_moe_max_k];
  __shared__ float w[k_moe_max_k];
  __shared__ float gate, red[32];
  const int gw = static_cast<int>(blockIdx.x) * k_warps + static_cast<int>(threadIdx.x) / 32;
  const int nw = static_cast<int>(gridDim.x) * k_warps;
  const int64_t E = a.n_embd, F = a.n_ff, Fs = a.n_ff_shexp;
  const bool shared = Fs > 0;
  const int n_logits = a.n_expert + (shared ? 1 : 0);
  const int64_t n_sh = shared ? 2 * Fs : 0, first_sh = ((gw - n_logits) % nw + nw) % nw;
  const int64_t gu_rb = row_bytes_of<GU>(E), rbs = row_bytes_of<D>(Fs);
  const int n_pieces = static_cast<int>(E / GU::qk) * GU::ppb;
  const auto* sg = static_cast<const uint8_t*>(a.shexp_gate);
  const auto* su = static_cast<const uint8_t*>(a.shexp_up);
  const auto* sd = static_cast<const uint8_t*>(a.shexp_down);
  const auto router_row = [&](int i) { return i < a.n_expert ? a.router + i * E : a.shexp_gate_row; };
  const auto sh_row = [&](int64_t j) { return (j < Fs ? sg + j * gu_rb : su + (j - Fs) * gu_rb); };
  const shared_xn xs = shared_layout(smem, E);
  const x_view_plain xq{nullptr, xs.q, xs.ds, E};

  // Phase 1's weights and the shared expert's down rows are known now: into L2 while the
  // previous kernel finishes.
  float4 wv[norm::k_chunks];
  load_norm_weights(a.norm_w, static_cast<int>(E / 4), wv);
  if (p.prefetch) {
    for (int i = gw; i < n_logits; i += nw) warp_prefetch(router_row(i), E * 4);
    for (int64_t j = first_sh; j < n_sh; j += nw) warp_prefetch(sh_row(j), gu_rb);
    if (shared)
      for (int64_t o = gw; o < E; o += nw) warp_prefetch(sd + o * rbs, rbs);
  }
  pdl_wait();
  norm_x(a.x, wv, static_cast<int>(E), a.eps, xs.xf, xs.q, xs.ds, red);
  __syncthreads();
  for (int i = gw; i < n_logits; i += nw) {
    const float v = float_row_dot(router_row(i), xs.xf, static_cast<int>(E / 4));
    if (threadIdx.x % 32 == 0) p.logits[i] = v;
  }
  float* gu_sh = p.gu + 2 * a.k * F;
  warp_rows<GU>(first_sh, n_sh, nw, n_pieces, gu_rb, xq, sh_row, [gu_sh](int64_t j, float v) { gu_sh[j] = v; });
  grid_barrier(p.bar);

  // Phase 2: the selection, then the selected experts' gate/up rows (and their down rows, for
  // phase 3) into L2 before any of them is read.
  route_block(p, ids, w, &gate);
  __syncthreads();
  const auto* g0 = static_cast<const uint8_t*>(a.gate);
  const auto* u0 = static_cast<const uint8_t*>(a.up);
  const auto* d0 = static_cast<const uint8_t*>(a.down);
  const int64_t n2 = 2 * a.k * F, drb = row_bytes_of<D>(F);
  const auto row2 = [&](int64_t i) {
    const int64_t slot = i / (2 * F), r = i % F;
    const uint8_t* m = (i / F) % 2 == 0 ? g0 : u0;
    return m + static_cast<int64_t>(ids[slot]) * static_cast<int64_t>(a.gate_up_stride) + r * gu_rb;
  };
  if (p.prefetch) {
    for (int64_t i = gw; i < n2; i += nw) warp_prefetch(row2(i), gu_rb);
    for (int64_t o = gw; o < E; o += nw)
      for (int j = 0; j < a.k; ++j)
        warp_prefetch(d0 + static_cast<int64_t>(ids[j]) * static_cast<int64_t>(a.down_stride) + o * drb, drb);
  }
  float* gu = p.gu;
  warp_rows<GU>(gw, n2, nw, n_pieces, gu_rb, xq, row2, [gu](int64_t i, float v) { gu[i] = v; });
  grid_barrier(p.bar);

  // Phase 3.
  swiglu_to_shared(p, smem);
  __syncthreads();
  down_rows<D>(p, smem, ids, w, gate, gw, nw);

  // Phase 4.
  if (a.next.w == nullptr || !grid_last_block(p.last)) return;
  pdl_trigger();  // every other block has finished: the next kernel may start its launch
  next_norm(p, red);
}

template <class F>
cudaError_t with_gate_up_type(ggml_type t, F&& f) {
  switch (t) {
    case ggml_type::q4_k: return f(mq_q4_k{});
    case ggml_type::q5_k: return f(mq_q5_k{});
    case ggml_type::q6_k: return f(mq_q6_k{});
    case ggml_type::q8_0: return f(mq_q8_0{});
    default: return cudaErrorInvalidValue;
  }
}

template <class F>
cudaError_t with_down_type(ggml_type t, F&& f) {
  switch (t) {
    case ggml_type::q4_k: return f(fx<mq_q4_k>{});
    case ggml_type::q5_k: return f(fx<mq_q5_k>{});
    case ggml_type::q6_k: return f(fx<mq_q6_k>{});
    case ggml_type::q8_0: return f(fx<mq_q8_0>{});
    default: return cudaErrorInvalidValue;
  }
}

bool supported_type(ggml_type t) {
  return t == ggml_type::q4_k || t == ggml_type::q5_k || t == ggml_type::q6_k || t == ggml_type::q8_0;
}

// Gate/up pieces a row: the int8 mat-vec's (Q4_K: 4 a block, Q5_K and Q6_K: 8, Q8_0: 1).
int64_t gate_up_pieces(ggml_type t, int64_t n_embd) {
  const int64_t blocks = n_embd / type_info(t).block_size;
  return t == ggml_type::q4_k ? 4 * blocks : t == ggml_type::q8_0 ? blocks : 8 * blocks;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

constexpr size_t k_sync_bytes = 16;  // the two grid-sync words, padded

size_t logits_floats(int n_expert) { return (static_cast<size_t>(n_expert) + 1 + 3) / 4 * 4; }

// The grid-sync check's kernel (moe_decode_layer_sync_check): rounds of barriers over
// double-buffered values, then the last-block ticket.
__global__ void __launch_bounds__(k_threads, 2) grid_sync_check_kernel(int* vals, int* out, int rounds,
                                                                       unsigned* words) {
  const int n = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  int sum = 0;
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x == 0) vals[(r & 1) * n + b] = r * n + b;
    grid_barrier(words);
    if (threadIdx.x == 0) sum += __ldcg(vals + (r & 1) * n + (b + 1) % n);
  }
  if (threadIdx.x == 0) out[b] = sum;
  if (grid_last_block(words + 1) && threadIdx.x == 0) atomicAdd(out + n, 1);
}

// Kernel over the layer's grid (one or two blocks an SM, as many as are resident), cooperative
// and, on sm_90, a programmatic dependent. Whether a cooperative launch may be a programmatic
// dependent is not documented either way: where the driver refuses it, launches are plain
// cooperative ones from then on (the launch gap back, the result the same). grid: the blocks.
template <auto Kernel, class... A>
cudaError_t launch_grid(cudaStream_t stream, int& grid, A... args) {
  int resident = 0;
  const cudaError_t r = resident_blocks<Kernel, k_threads>(resident);
  if (r != cudaSuccess) return r;
  const int sms = device_attribute<cudaDevAttrMultiProcessorCount>();
  // Two blocks an SM at most: more blocks add arrivals to every barrier, not bandwidth.
  // TANDEM_MOE_PERSISTENT_BLOCKS=1: one (fewer barrier arrivals, half the warps in flight).
  static const int per_sm = [] {
    const char* e = std::getenv("TANDEM_MOE_PERSISTENT_BLOCKS");
    return e && e[0] == '1' && e[1] == 0 ? 1 : 2;
  }();
  grid = std::max(1, std::min(resident, per_sm * std::max(sms, 1)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(k_threads);
  cfg.stream = stream;
  static std::atomic<bool> pdl_refused{false};
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  attr[n].id = cudaLaunchAttributeCooperative;
  attr[n++].val.cooperative = 1;
  if (pdl_supported() && !pdl_refused.load(std::memory_order_relaxed)) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  cudaError_t e = cudaLaunchKernelEx(&cfg, Kernel, args...);
  if (e != cudaSuccess && n > 1) {
    (void)cudaGetLastError();
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, Kernel, args...);
    if (e == cudaSuccess) pdl_refused.store(true, std::memory_order_relaxed);
  }
  return e;
}

}  // namespace

bool moe_decode_layer_fits(const moe_decode_layer_args& a) {
  if (!supported_type(a.gate_up_type) || !supported_type(a.down_type)) return false;
  if (a.n_expert < 1 || a.n_expert > k_moe_max_experts || a.k < 1 || a.k > k_moe_max_k || a.k > a.n_expert)
    return false;
  if (!(a.eps >= 0.f) || (a.next.w && !(a.next.eps >= 0.f))) return false;
  const int64_t E = a.n_embd, F = a.n_ff, Fs = a.n_ff_shexp;
  // xn, its int8 copy and scales share the SwiGLU's shared memory: 4 + 1 + 1/4 bytes a value.
  if (E < 256 || E % 256 != 0 || gate_up_pieces(a.gate_up_type, E) > 32 * k_pl ||
      E * 21 / 4 > int64_t{k_moe_decode_layer_max_h} * 4 || E > 4 * norm::k_threads * norm::k_chunks)
    return false;
  if (a.next.w && (!moe_combine_norm_fits(1, E) || !a.next.xn || !a.next.work || !aligned16(a.next.w) ||
                   !aligned16(a.next.xn) || !aligned16(a.next.work)))
    return false;
  if (F < 256 || F % 256 != 0 || Fs < 0 || Fs % 256 != 0 || a.k * F + Fs > k_moe_decode_layer_max_h) return false;
  if (Fs > 0 && (!a.shexp_gate || !a.shexp_up || !a.shexp_down || !a.shexp_gate_row ||
                 !aligned16(a.shexp_gate) || !aligned16(a.shexp_up) || !aligned16(a.shexp_down) ||
                 !aligned16(a.shexp_gate_row)))
    return false;
  const void* const need[] = {a.x, a.norm_w, a.router, a.gate, a.up, a.down, a.work};
  for (const void* q : need)
    if (!q || !aligned16(q)) return false;
  if (!a.ids || !a.weights || a.gate_up_stride % 16 != 0 || a.down_stride % 16 != 0) return false;
  return kernel_arch() >= 70 && device_attribute<cudaDevAttrCooperativeLaunch>() != 0;
}

size_t moe_decode_layer_work_bytes(int n_expert, int k, int64_t n_ff, int64_t n_ff_shexp) {
  if (n_expert < 1 || k < 1 || n_ff < 0 || n_ff_shexp < 0) return 0;
  return k_sync_bytes + (logits_floats(n_expert) + 2 * (static_cast<size_t>(k) * n_ff + n_ff_shexp)) * sizeof(float);
}

cudaError_t moe_decode_layer_reset(void* work, cudaStream_t stream) {
  if (!work) return cudaErrorInvalidValue;
  return cudaMemsetAsync(work, 0, k_sync_bytes, stream);
}

cudaError_t launch_moe_decode_layer(const moe_decode_layer_args& a, cudaStream_t stream) {
  if (!moe_decode_layer_fits(a)) return cudaErrorInvalidValue;
  static const bool prefetch = [] {
    const char* e = std::getenv("TANDEM_MOE_PERSISTENT_PREFETCH");
    return !(e && e[0] == '0' && e[1] == 0);
  }();
  dl_params p{};
  p.a = a;
  p.prefetch = prefetch;
  if (a.next.w) {
    const matvec_qx nq = matvec_x_parts(a.next.work, a.n_embd, 1);
    p.next_qx = nq.q, p.next_ds = nq.ds;
  }
  auto* base = static_cast<uint8_t*>(a.work);
  p.bar = reinterpret_cast<unsigned*>(base);
  p.last = p.bar + 1;
  p.logits = reinterpret_cast<float*>(base + k_sync_bytes);
  p.gu = p.logits + logits_floats(a.n_expert);
  return with_gate_up_type(a.gate_up_type, [&](auto gu) {
    using GU = decltype(gu);
    return with_down_type(a.down_type, [&](auto d) {
      int grid = 0;
      return launch_grid<moe_decode_layer_kernel<GU, decltype(d)>>(stream, grid, p);
    });
  });
}

cudaError_t moe_decode_layer_sync_check(int* vals, int* out, int rounds, void* work, int& grid,
                                        cudaStream_t stream) {
  if (!vals || !out || !work || rounds < 0) return cudaErrorInvalidValue;
  return launch_grid<grid_sync_check_kernel>(stream, grid, vals, out, rounds, static_cast<unsigned*>(work));
}

}  // namespace tandem
