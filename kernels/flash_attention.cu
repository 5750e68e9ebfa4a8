// Causal flash attention for prefill runs over the paged KV cache (f16, f32 or Q8_0 rows): the
// launcher, and the WMMA blocks (sm_70 and up; sm_80+ runs kernels/flash_attention_mma.cu's
// mma.sync blocks by default). A WMMA block takes 64 (token, head) rows of one run that share a KV
// head, streams K/V tiles into shared memory as fp16 and runs S = Q·Kᵀ and O += P·V on WMMA
// tensor cores, softmax online in fp32 (S and P go through shared memory).
#include "kernels/flash_attention.h"

#include <cuda_fp16.h>
#include <mma.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/arch.h"
#include "kernels/flash_attention_tiles.cuh"

namespace tandem {
namespace {

using namespace nvcuda;
using namespace flash;
using flash_params = flash::params;

constexpr int k_warps = 4;
constexpr int k_threads = 32 * k_warps;
constexpr int k_rows = 16 * k_warps;  // (token, head) rows per block: one WMMA row tile per warp
// Keys per tile: 64, but 32 at head_dim 256 so that a block fits V100's 96 KiB of shared memory.
template <int D>
constexpr int keys_per_tile() {
  return D == 256 ? 32 : 64;
}

// Blocks per SM to fit registers for (sm_90: H200's shared memory holds this many as well); 256
// keeps a warp's 16 × 256 fp32 O (128 registers a lane) whole.
template <int D>
constexpr int min_blocks() {
  return D == 256 ? 1 : D == 128 ? 3 : 4;
}

// Shared memory of a block, in bytes. Rows are padded (8 halves, 8 floats) against bank conflicts;
// every WMMA pointer stays 32-byte aligned. Each warp's P (fp16) overwrites its own S (fp32).
template <int D>
struct smem_layout {
  static constexpr int BN = keys_per_tile<D>();
  static constexpr int LDH = D + 8;   // halves per Q, K, V row
  static constexpr int LDS = BN + 8;  // floats per S row
  static constexpr int LDP = BN + 8;  // halves per P row
  static constexpr int k_off = k_rows * LDH * 2;
  static constexpr int v_off = k_off + BN * LDH * 2;
  static constexpr int s_off = v_off + BN * LDH * 2;
  static constexpr int s_warp = 16 * LDS;  // floats of one warp's S
  static constexpr int c_off = s_off + k_warps * s_warp * 4;
  static constexpr int bytes = c_off + k_rows * 4;  // + a float per row: the softmax correction, then l
};

// Keys kv0..kv0+BN-1 of kv head kvh into ks and vs ([key][LDH] fp16), through the block table;
// keys from n_kv on are zeros (they are masked, and a zero V row keeps 0 · garbage out of O).
// A thread's loads go out a group at a time before their stores, to keep several in flight.
template <int D, class T>
__device__ void load_kv_tile(const flash_params& p, const int32_t* table, int kvh, int kv0, int n_kv,
                             uint16_t* ks, uint16_t* vs) {
  using L = smem_layout<D>;
  constexpr int C = D / 8;  // 8-value chunks per row
  constexpr int iters = L::BN * C / k_threads;
  // Fewer in flight where registers are scarce: head_dim 256, and Q8_0 (which dequantizes them).
  constexpr int group = D == 256 || std::is_same<T, q8_row>::value ? 2 : iters < 4 ? iters : 4;
  static_assert(L::BN * C % k_threads == 0 && iters % group == 0, "tile chunks must split evenly");
#pragma unroll
  for (int it0 = 0; it0 < iters; it0 += group) {
    uint4 kr[group], vr[group];
#pragma unroll
    for (int u = 0; u < group; ++u) {
      // Keys past the end load the last key's row (no branch around the loads) and become zeros.
      const int i = threadIdx.x + (it0 + u) * k_threads, j = min(kv0 + i / C, n_kv - 1), col = (i % C) * 8;
      const int64_t row = cache_row(p, table, j, kvh);
      kr[u] = load_cache8<D, T>(p.k_cache, row, col);
      vr[u] = load_cache8<D, T>(p.v_cache, row, col);
      if (kv0 + i / C >= n_kv) kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < group; ++u) {
      const int i = threadIdx.x + (it0 + u) * k_threads, r = i / C, col = (i % C) * 8;
      *reinterpret_cast<uint4*>(ks + r * L::LDH + col) = kr[u];
      *reinterpret_cast<uint4*>(vs + r * L::LDH + col) = vr[u];
    }
  }
}

// Row r of the block: (token, head) unit u0 + r of the run, units ordered token-major, so a tile
// is any 64 consecutive units and GQA ratios need not divide 64. Rows past the run are zeros.
template <int D>
__device__ void load_q_tile(const flash_params& p, const flash_run& run, int kvh, int grp, int u0,
                            uint16_t* qs) {
  using L = smem_layout<D>;
  constexpr int C = D / 4;  // float4 chunks per row
  const int n_units = run.n * grp;
  for (int i = threadIdx.x; i < k_rows * C; i += k_threads) {
    const int r = i / C, col = (i % C) * 4, u = u0 + r;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (u < n_units) {
      x = *reinterpret_cast<const float4*>(p.q + unit_row(p, run, kvh, grp, u) * D + col);
    }
    const float s = p.qscale;
    *reinterpret_cast<uint2*>(qs + r * L::LDH + col) =
        make_uint2(pack_half2(x.x * s, x.y * s), pack_half2(x.z * s, x.w * s));
  }
}

using acc_frag = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// The warp's S (16 × BN, fp32, row-major in sw) = its 16 Q rows · the tile's keysᵀ.
template <int D>
__device__ __forceinline__ void tile_scores(const uint16_t* qw, const uint16_t* ks, float* sw) {
  using L = smem_layout<D>;
  constexpr int NB = L::BN / 16;
  acc_frag acc[NB];
#pragma unroll
  for (int n = 0; n < NB; ++n) wmma::fill_fragment(acc[n], 0.f);
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::load_matrix_sync(a, reinterpret_cast<const half*>(qw) + k * 16, L::LDH);
#pragma unroll
    for (int n = 0; n < NB; ++n) {
      // Kᵀ as a column-major B: element (d, key) sits at key · LDH + d.
      wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> b;
      wmma::load_matrix_sync(b, reinterpret_cast<const half*>(ks) + n * 16 * L::LDH + k * 16, L::LDH);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
#pragma unroll
  for (int n = 0; n < NB; ++n) wmma::store_matrix_sync(sw + n * 16, acc[n], L::LDS, wmma::mem_row_major);
}

// Online softmax of the warp's 16 rows, two lanes a row, each taking alternate 4-key chunks (so
// the float4 reads of a quarter warp hit distinct banks). Keys past p_row (this lane's row's
// position) are masked; only tiles that cross the diagonal test them. P goes to sw as fp16 over
// S; corr (how much the row's old O and l shrink) to cw.
template <int D>
__device__ __forceinline__ void tile_softmax(float* sw, float* cw, int kv0, int p_row, float& m, float& l) {
  using L = smem_layout<D>;
  constexpr int BN = L::BN, LDS = L::LDS, LDP = L::LDP, NC = BN / 8;  // NC chunks of 4 keys per lane
  const int lane = threadIdx.x % 32, rr = lane / 2, h = lane % 2;
  float s[NC][4];
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const float4 v = *reinterpret_cast<const float4*>(sw + rr * LDS + (2 * c + h) * 4);
    s[c][0] = v.x, s[c][1] = v.y, s[c][2] = v.z, s[c][3] = v.w;
  }
  if (kv0 + BN - 1 > p_row) {
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (kv0 + (2 * c + h) * 4 + e > p_row) s[c][e] = -INFINITY;
  }
  float mx = -INFINITY;
#pragma unroll
  for (int c = 0; c < NC; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) mx = fmaxf(mx, s[c][e]);
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  // Key 0 is in every row's first tile, so m_new is finite; exp2f(-inf) = 0 on the first tile.
  const float m_new = fmaxf(m, mx), corr = exp2f(m - m_new);
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < NC; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[c][e] = exp2f(s[c][e] - m_new);
      sum += s[c][e];
    }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  l = l * corr + sum;
  m = m_new;
  __syncwarp();  // every lane has read its scores before P overwrites them
  uint16_t* prow = reinterpret_cast<uint16_t*>(sw) + rr * LDP;
#pragma unroll
  for (int c = 0; c < NC; ++c)
    *reinterpret_cast<uint2*>(prow + (2 * c + h) * 4) =
        make_uint2(pack_half2(s[c][0], s[c][1]), pack_half2(s[c][2], s[c][3]));
  if (h == 0) cw[rr] = corr;
}

// Where an accumulator fragment's elements sit: element i of this lane is at row (rows >> 4i) & 15,
// column (cols >> 4i) & 15, the same in every fragment (4 bits each: 8 elements).
struct frag_layout {
  uint32_t rows, cols;
  __device__ int row(int i) const { return (rows >> (4 * i)) & 15; }
  __device__ int col(int i) const { return (cols >> (4 * i)) & 15; }
};
constexpr int k_frag_elems = acc_frag::num_elements;
static_assert(k_frag_elems <= 8, "frag_layout packs 8 elements");

// O (the warp's 16 rows × D in o[D/16]) = O · corr(row) + P · V.
template <int D>
__device__ __forceinline__ void tile_accumulate(acc_frag (&o)[D / 16], frag_layout lay, const float* cw,
                                                const uint16_t* pw, const uint16_t* vs) {
  using L = smem_layout<D>;
  constexpr int NE = k_frag_elems;
  float c[NE];
#pragma unroll
  for (int i = 0; i < NE; ++i) c[i] = cw[lay.row(i)];
#pragma unroll
  for (int f = 0; f < D / 16; ++f)
#pragma unroll
    for (int i = 0; i < NE; ++i) o[f].x[i] *= c[i];
#pragma unroll
  for (int k = 0; k < L::BN / 16; ++k) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
    wmma::load_matrix_sync(a, reinterpret_cast<const half*>(pw) + k * 16, L::LDP);
#pragma unroll
    for (int f = 0; f < D / 16; ++f) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
      wmma::load_matrix_sync(b, reinterpret_cast<const half*>(vs) + k * 16 * L::LDH + f * 16, L::LDH);
      wmma::mma_sync(o[f], a, b, o[f]);
    }
  }
}

// Which element of an accumulator fragment holds which (row, column): WMMA leaves the layout
// to the architecture, so the warp loads a tile whose entries are their own row·16 + column.
__device__ __forceinline__ frag_layout learn_layout(float* sw, int ld) {
  const int lane = threadIdx.x % 32;
  for (int i = lane; i < 256; i += 32) sw[(i / 16) * ld + i % 16] = static_cast<float>(i);
  __syncwarp();
  acc_frag f;
  wmma::load_matrix_sync(f, sw, ld, wmma::mem_row_major);
  frag_layout lay{0u, 0u};
#pragma unroll
  for (int i = 0; i < k_frag_elems; ++i) {
    const uint32_t e = static_cast<uint32_t>(f.x[i]);
    lay.rows |= (e >> 4) << (4 * i), lay.cols |= (e & 15) << (4 * i);
  }
  __syncwarp();
  return lay;
}

template <int D>
__device__ __forceinline__ void write_out(const flash_params& p, const flash_run& run, int kvh, int grp, int u_warp,
                                          const acc_frag (&o)[D / 16], frag_layout lay, const float* lw) {
  const int n_units = run.n * grp;
#pragma unroll
  for (int i = 0; i < k_frag_elems; ++i) {
    const int r = lay.row(i), col = lay.col(i), u = u_warp + r;
    if (u >= n_units) continue;
    const float inv = 1.f / lw[r];
    float* dst = p.out + unit_row(p, run, kvh, grp, u) * D + col;
#pragma unroll
    for (int f = 0; f < D / 16; ++f) dst[f * 16] = o[f].x[i] * inv;
  }
}

template <int D, class T>
__global__ void __launch_bounds__(k_threads, min_blocks<D>()) flash_attention_kernel(const flash_params p) {
  using L = smem_layout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  auto* qs = reinterpret_cast<uint16_t*>(smem);
  auto* ks = reinterpret_cast<uint16_t*>(smem + L::k_off);
  auto* vs = reinterpret_cast<uint16_t*>(smem + L::v_off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* sw = reinterpret_cast<float*>(smem + L::s_off) + warp * L::s_warp;
  float* cw = reinterpret_cast<float*>(smem + L::c_off) + warp * 16;

  flash_run run;
  int tile;
  find_tile(p.runs, run, tile);
  const int kvh = blockIdx.y, grp = p.n_head / p.n_head_kv, n_units = run.n * grp, u0 = tile * k_rows;
  if (tile < 0 || u0 >= n_units) return;  // uniform over the block
  // The block's keys end at its last row's position; each lane's softmax row masks past its own.
  const int n_kv = run.pos0 + (min(u0 + k_rows, n_units) - 1) / grp + 1;
  const int u_lane = min(u0 + warp * 16 + lane / 2, n_units - 1);
  const int p_row = run.pos0 + u_lane / grp;
  const int32_t* table = p.tables + static_cast<int64_t>(run.table) * p.max_blocks;

  const frag_layout lay = learn_layout(sw, L::LDS);
  load_q_tile<D>(p, run, kvh, grp, u0, qs);
  acc_frag o[D / 16];
#pragma unroll
  for (int f = 0; f < D / 16; ++f) wmma::fill_fragment(o[f], 0.f);
  float m = -INFINITY, l = 0.f;  // this lane's row (lanes 2r and 2r+1 hold the same)
  for (int kv0 = 0; kv0 < n_kv; kv0 += L::BN) {
    __syncthreads();  // every warp is done with the previous tile (and Q is stored)
    load_kv_tile<D, T>(p, table, kvh, kv0, n_kv, ks, vs);
    __syncthreads();
    tile_scores<D>(qs + warp * 16 * L::LDH, ks, sw);
    __syncwarp();
    tile_softmax<D>(sw, cw, kv0, p_row, m, l);
    __syncwarp();
    tile_accumulate<D>(o, lay, cw, reinterpret_cast<const uint16_t*>(sw), vs);
  }
  __syncwarp();  // the last corrections are read before l replaces them
  if (lane % 2 == 0) cw[lane / 2] = l;
  __syncwarp();
  write_out<D>(p, run, kvh, grp, u0 + warp * 16, o, lay, cw);
}

template <int D, class T>
cudaError_t launch_tiles(const flash_params& p, int tiles, int n_head_kv, cudaStream_t stream) {
  constexpr int bytes = smem_layout<D>::bytes;
  // Set on every launch: the attribute is per device, and stages of a split run on several.
  const cudaError_t e = allow_dynamic_smem(flash_attention_kernel<D, T>, bytes);
  if (e != cudaSuccess) return e;
  flash_attention_kernel<D, T><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(n_head_kv)), k_threads,
                                 bytes, stream>>>(p);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_t(const flash_params& p, int head_dim, int tiles, int n_head_kv, cudaStream_t stream) {
  switch (head_dim) {
    case 32: return launch_tiles<32, T>(p, tiles, n_head_kv, stream);
    case 64: return launch_tiles<64, T>(p, tiles, n_head_kv, stream);
    case 128: return launch_tiles<128, T>(p, tiles, n_head_kv, stream);
    case 256: return launch_tiles<256, T>(p, tiles, n_head_kv, stream);
    default: return cudaErrorInvalidValue;
  }
}

bool valid_args(const flash_attention_args& a) {
  if (a.n_runs < 0 || a.n_head <= 0 || a.n_head_kv <= 0 || a.n_head_kv > 65535 || a.n_head % a.n_head_kv != 0 ||
      a.block_size <= 0 || a.max_blocks <= 0 || a.n_tok < 0)
    return false;
  if (a.head_dim != 32 && a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) return false;
  if (a.cache_type != ggml_type::f16 && a.cache_type != ggml_type::f32 && a.cache_type != ggml_type::q8_0)
    return false;
  if (a.n_runs > 0 && !a.runs) return false;
  const int64_t max_keys = static_cast<int64_t>(a.max_blocks) * a.block_size;
  for (int i = 0; i < a.n_runs; ++i) {
    const flash_run& r = a.runs[i];
    if (r.n < 0 || r.t0 < 0 || r.pos0 < 0 || r.table < 0 || int64_t{r.t0} + r.n > a.n_tok ||
        int64_t{r.pos0} + r.n > max_keys)
      return false;
  }
  return true;
}

// The kind a launch runs: the caller's, or for best the environment's override, else mma.sync
// blocks where the device runs sm_80 code (wmma below).
flash_kernel pick_kernel(flash_kernel asked, int head_dim) {
  if (asked != flash_kernel::best) return asked;
  static const flash_kernel forced = [] {
    const char* e = std::getenv("TANDEM_FLASH_KERNEL");
    const std::string v = e ? e : "";
    return v == "wmma" ? flash_kernel::wmma : v == "mma64" ? flash_kernel::mma64
                                            : v == "mma128" ? flash_kernel::mma128 : flash_kernel::best;
  }();
  if (forced != flash_kernel::best && (forced == flash_kernel::wmma || flash_mma_rows(head_dim, forced) > 0))
    return forced;
  if (kernel_arch() < 80) return flash_kernel::wmma;
  return head_dim <= 128 ? flash_kernel::mma128 : flash_kernel::mma64;
}

cudaError_t launch_kind(const flash_params& p, const flash_attention_args& a, flash_kernel k, int tiles,
                        cudaStream_t stream) {
  if (k != flash_kernel::wmma) return launch_flash_mma(p, a.head_dim, a.cache_type, k, tiles, a.n_head_kv, stream);
  if (a.cache_type == ggml_type::f16) return launch_t<uint16_t>(p, a.head_dim, tiles, a.n_head_kv, stream);
  if (a.cache_type == ggml_type::f32) return launch_t<float>(p, a.head_dim, tiles, a.n_head_kv, stream);
  if (a.cache_type == ggml_type::q8_0) return launch_t<q8_row>(p, a.head_dim, tiles, a.n_head_kv, stream);
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_flash_attention(const flash_attention_args& a, cudaStream_t stream) {
  if (!valid_args(a)) return cudaErrorInvalidValue;
  const flash_kernel kind = pick_kernel(a.kernel, a.head_dim);
  const int rows = kind == flash_kernel::wmma ? k_rows : flash_mma_rows(a.head_dim, kind);
  if (rows <= 0 || (kind != flash_kernel::wmma && kernel_arch() < 80)) return cudaErrorInvalidValue;
  const int grp = a.n_head / a.n_head_kv;
  flash_params p{};
  p.q = a.q, p.k_cache = a.k_cache, p.v_cache = a.v_cache, p.out = a.out, p.tables = a.block_tables;
  p.n_head = a.n_head, p.n_head_kv = a.n_head_kv, p.block_size = a.block_size, p.max_blocks = a.max_blocks;
  p.qscale = a.scale * 1.4426950408889634f;  // log2(e)
  for (int i = 0; i < a.n_runs;) {
    // Up to k_max_runs non-empty runs per launch.
    run_table& t = p.runs;
    t.n_runs = 0;
    int64_t tiles = 0;
    for (; i < a.n_runs && t.n_runs < k_max_runs; ++i) {
      const flash_run& r = a.runs[i];
      if (r.n == 0) continue;
      t.run[t.n_runs] = r;
      t.tile0[t.n_runs++] = static_cast<int>(tiles);
      tiles += (int64_t{r.n} * grp + rows - 1) / rows;
      if (tiles > INT_MAX) return cudaErrorInvalidValue;
    }
    if (tiles == 0) continue;
    const cudaError_t e = launch_kind(p, a, kind, static_cast<int>(tiles), stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace tandem
