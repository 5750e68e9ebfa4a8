// Attention kernels over the paged KV cache (f16, f32 or Q8_0 rows). Decode: one thread block per
// (token, head, split), each warp walking keys in runs of four with an online softmax, lanes
// holding head_dim/32 dims; the last split of a head to finish merges the partials (one launch).
// Q8_0 rows are quantized on the GPU exactly as the CPU's quantize_kv_row. Deep f16 caches may
// take the tensor-core kernel of kernels/attention_deep.cu; both share kernels/attention_decode.cuh.
#include "kernels/attention.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <cstdlib>

#include "kernels/arch.h"
#include "kernels/attention_decode.cuh"
#include "kernels/matvec_x.cuh"
#include "kernels/pdl.cuh"
#include "kernels/q8_fit.cuh"
#include "kernels/rope.cuh"
#include "kernels/quant_blocks.cuh"

namespace tandem {
namespace {

// Short caches take at most this many splits (of k_split_keys keys each); deeper ones, runs of
// deep_split_keys() keys, up to k_max_split.
constexpr int k_short_splits = 32;
// Keys per split when there are few (token, head) pairs: 64 gives a warp 16 keys (four runs of
// k_keys) per split. The shortest caches (at most k_fill_keys keys) take splits of down to
// k_fill_split_keys keys until a launch has about k_fill_blocks blocks (paged_attention_splits).
constexpr int k_split_keys = 64;
constexpr int k_fill_keys = 256, k_fill_split_keys = 32, k_fill_blocks = 256;
// Query heads of one KV head a grouped decode block takes (GQA): each K/V row it loads serves
// them all. TANDEM_ATTN_GROUPED=0 takes one block per query head instead, to measure.
constexpr int k_group_heads = 4;

using kvq::quantize_q8_0_thread;
using kvq::quantize_q8_0_warp;

// One thread per 32-value block, numbered as in store_kv_q8_0_kernel.
__global__ void store_kv_q8_0_rows_kernel(const float* __restrict__ k, const float* __restrict__ v, uint8_t* kc,
                                          uint8_t* vc, const int32_t* __restrict__ slots, int n_tok, int row_elems) {
  const int nb = row_elems / 32;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= static_cast<int64_t>(n_tok) * 2 * nb) return;
  const int t = static_cast<int>(g / (2 * nb)), r = static_cast<int>(g % (2 * nb));
  const bool is_v = r >= nb;
  const int b = is_v ? r - nb : r;
  quantize_q8_0_thread((is_v ? v : k) + static_cast<int64_t>(t) * row_elems + b * 32,
                       (is_v ? vc : kc) + (static_cast<int64_t>(slots[t]) * nb + b) * 34);
}

// Below this many blocks a warp per block finishes sooner (decode); above, a thread per block.
constexpr int64_t k_q8_thread_min_blocks = 8192;
constexpr int k_q8_store_warps = 4;

// One warp per 32-value block of K or V: warp g covers token g / (2 nb), K then V, block g % nb.
__global__ void __launch_bounds__(32 * k_q8_store_warps)
    store_kv_q8_0_kernel(const float* __restrict__ k, const float* __restrict__ v, uint8_t* kc, uint8_t* vc,
                         const int32_t* __restrict__ slots, int n_tok, int row_elems) {
  const int nb = row_elems / 32;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * k_q8_store_warps + threadIdx.x / 32;
  if (g >= static_cast<int64_t>(n_tok) * 2 * nb) return;  // whole warps exit together
  const int t = static_cast<int>(g / (2 * nb)), r = static_cast<int>(g % (2 * nb));
  const bool is_v = r >= nb;
  const int b = is_v ? r - nb : r;
  const float x = (is_v ? v : k)[static_cast<int64_t>(t) * row_elems + b * 32 + threadIdx.x % 32];
  quantize_q8_0_warp(x, (is_v ? vc : kc) + (static_cast<int64_t>(slots[t]) * nb + b) * 34);
}

template <class T>
__global__ void store_kv_kernel(const float* __restrict__ k, const float* __restrict__ v, T* kc, T* vc,
                                const int32_t* __restrict__ slots, int row_elems) {
  const int t = blockIdx.y;
  const int64_t dst = static_cast<int64_t>(slots[t]) * row_elems;
  const int64_t src = static_cast<int64_t>(t) * row_elems;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < row_elems; i += gridDim.x * blockDim.x) {
    if constexpr (sizeof(T) == 2) {
      kc[dst + i] = float_to_fp16(k[src + i]);
      vc[dst + i] = float_to_fp16(v[src + i]);
    } else {
      kc[dst + i] = k[src + i];
      vc[dst + i] = v[src + i];
    }
  }
}

constexpr int k_rope_warps = 4;


// What a warp's row needs that no kernel of the step writes: its norm weights and its RoPE
// rotations (positions come with the step's upload, before any kernel of it), so that they are
// fetched before pdl_wait: from the step's table (a.rot), or else computed as rope_kernel does,
// in double precision (which, measured, cost the decode step 6% on an H200).
struct rope_prep {
  float nw[8];       // norm weight of dims lane + 32 k (head_dim <= 256)
  float c[4], s[4];  // rotation of pairs lane + 32 k (rope_dim / 2 <= 128)
};

__device__ void prepare_row(const qk_rope_store_args& a, int t, int j, rope_prep& p) {
  const int lane = threadIdx.x % 32;
  if (j >= a.n_head + a.n_head_kv) return;  // v rows are copied as they are
  const float* nw = j < a.n_head ? a.q_norm : a.k_norm;
#pragma unroll
  for (int k = 0; k < 8; ++k) p.nw[k] = nw && lane + 32 * k < a.head_dim ? nw[lane + 32 * k] : 0.f;
  const int half = a.rope_dim / 2;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = lane + 32 * k;
    if (i >= half) break;
    if (a.rot) {
      const float2 cs = reinterpret_cast<const float2*>(a.rot + static_cast<int64_t>(t) * a.rope_dim)[i];
      p.c[k] = cs.x, p.s[k] = cs.y;
      continue;
    }
    const float2 cs = rope_rotation(a.pos[t], i, a.rope_dim, a.theta);
    p.c[k] = cs.x, p.s[k] = cs.y;
  }
}

// One warp brings row j of token t (the n_head q heads, then the n_head_kv k heads, then the v
// heads) into buf: q and k get their per-head norm and RoPE (written back to q and k), v is copied.
__device__ void rope_row(const qk_rope_store_args& a, int t, int j, const rope_prep& p, float* buf) {
  const int lane = threadIdx.x % 32, D = a.head_dim;
  const bool is_q = j < a.n_head, is_v = j >= a.n_head + a.n_head_kv;
  const int hk = is_q ? 0 : (is_v ? j - a.n_head - a.n_head_kv : j - a.n_head);
  float* row = is_q ? a.q + (static_cast<int64_t>(t) * a.n_head + j) * D
                    : (is_v ? nullptr : a.k + (static_cast<int64_t>(t) * a.n_head_kv + hk) * D);
  const float* src = is_v ? a.v + (static_cast<int64_t>(t) * a.n_head_kv + hk) * D : row;
  const bool norm = (is_q ? a.q_norm : a.k_norm) != nullptr;
  float ss = 0.f;
  for (int i = lane; i < D; i += 32) {
    const float v = src[i];
    buf[i] = v;
    ss = fmaf(v, v, ss);
  }
  if (!is_v) {
    if (norm) {  // rms_norm_kernel's arithmetic with one warp per row
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      const float inv = 1.f / sqrtf(ss / static_cast<float>(D) + a.eps);
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (lane + 32 * k < D) buf[lane + 32 * k] = buf[lane + 32 * k] * inv * p.nw[k];
    }
    __syncwarp();
    const int half = a.rope_dim / 2;  // rope_kernel's arithmetic
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = lane + 32 * k;
      if (i >= half) break;
      const int ia = a.neox ? i : 2 * i, ib = a.neox ? i + half : 2 * i + 1;
      const float x0 = buf[ia], x1 = buf[ib];
      buf[ia] = x0 * p.c[k] - x1 * p.s[k];
      buf[ib] = x0 * p.s[k] + x1 * p.c[k];
    }
    __syncwarp();
    for (int i = lane; i < D; i += 32) row[i] = buf[i];
  }
  __syncwarp();
}

// Where row j (a k or v head) of token t goes in its cache, in elements of the row.
__device__ __forceinline__ int64_t cache_at(const qk_rope_store_args& a, int t, int j) {
  const int hk = j >= a.n_head + a.n_head_kv ? j - a.n_head - a.n_head_kv : j - a.n_head;
  return (static_cast<int64_t>(a.slots[t]) * a.n_head_kv + hk) * a.head_dim;
}

// One warp per (token, row), rows as rope_row numbers them; E: the cache's element (uint16_t for
// f16, float, or q8_row for q8_0 blocks, which the warp fits one after another).
template <class E>
__global__ void __launch_bounds__(32 * k_rope_warps) qk_rope_store_kernel(qk_rope_store_args a) {
  __shared__ float rows[k_rope_warps][256];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, D = a.head_dim;
  const int per_tok = a.n_head + 2 * a.n_head_kv;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * k_rope_warps + warp;
  const bool mine = r < static_cast<int64_t>(a.n_tok) * per_tok;
  const int t = static_cast<int>(r / per_tok), j = static_cast<int>(r % per_tok);
  rope_prep p;
  if (mine) prepare_row(a, t, j, p);
  pdl_wait();
  pdl_trigger();
  if (!mine) return;  // whole warps
  float* buf = rows[warp];
  rope_row(a, t, j, p, buf);
  if (j < a.n_head) return;
  void* cache = j >= a.n_head + a.n_head_kv ? a.v_cache : a.k_cache;
  if constexpr (std::is_same_v<E, q8_row>) {
    uint8_t* dst = static_cast<uint8_t*>(cache) + cache_at(a, t, j) / 32 * 34;
    for (int b = 0; b < D / 32; ++b) quantize_q8_0_warp(buf[32 * b + lane], dst + 34 * b);
  } else {
    E* dst = static_cast<E*>(cache) + cache_at(a, t, j);
    for (int i = lane; i < D; i += 32) {
      if constexpr (sizeof(E) == 2)
        dst[i] = float_to_fp16(buf[i]);
      else
        dst[i] = buf[i];
    }
  }
}

// Grid (n_tok * n_head_kv * n_sub, n_split), k_warps warps; GM = 1 is one block per (token,
// head). Split s covers keys [s * chunk, (s+1) * chunk). part: the split partials, after
// k_split_counters arrival counters (null without splits). Heads past the block's g compute on
// zero queries and write nothing.
template <int DPL, class T, int GM>
__global__ void __launch_bounds__(32 * k_warps)
    paged_attention_kernel(paged_attention_args a, int n_split, int chunk, float* part) {
  // Keys a warp loads at once: fewer when GM heads' queries and sums already take the registers.
  constexpr int KK = GM * DPL > 16 ? 2 : k_keys;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const head_group hg = group_of<GM>(a, blockIdx.x);
  const int kvh = hg.kvh;
  split_keys sk;
  if (!split_of(a, hg, n_split, chunk, sk)) return;
  const int begin = sk.begin, end = sk.end;
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.tok_table[hg.t]) * a.max_blocks;

  // Launched as a programmatic dependent of the q/k RoPE + store kernel: the batch's tables and
  // positions above came with the step's upload, before any kernel of it; q and the new key
  // come from that kernel.
  pdl_wait();
  pdl_trigger();  // the wo mat-vec may start fetching its weights
  float q[GM][DPL], acc[GM][DPL], m[GM], l[GM];
  start_group<DPL, GM>(a, hg, lane, q, acc, m, l);
  // Each warp takes runs of KK consecutive keys: the run's K and V loads are all issued before
  // the first is used, and the next run's table lookups go out while they are in flight, so a
  // warp waits for about one memory round trip per run.
  const auto rows_of = [&](int j0, int64_t(&row)[KK]) {
#pragma unroll
    for (int u = 0; u < KK; ++u) {
      const int j = min(j0 + u, end - 1);  // keys past the end load a valid row, masked below
      row[u] = kv_row(a, table, j, kvh);
    }
  };
  int64_t row[KK];
  if (begin + warp * KK < end) rows_of(begin + warp * KK, row);
  for (int j0 = begin + warp * KK; j0 < end; j0 += k_warps * KK) {
    float kr[KK][DPL], vr[KK][DPL];
#pragma unroll
    for (int u = 0; u < KK; ++u) load_kv<DPL, T>(a.k_cache, row[u], lane, kr[u]);
#pragma unroll
    for (int u = 0; u < KK; ++u) load_kv<DPL, T>(a.v_cache, row[u], lane, vr[u]);
    if (j0 + k_warps * KK < end) rows_of(j0 + k_warps * KK, row);
    attend_run<DPL, GM, KK>(q, kr, vr, end - j0, lane, m, l, acc);
  }
  finish_group<DPL, GM>(a, hg, sk.used, n_split, sk.pos, chunk, part, m, l, acc);
}

template <int DPL, class T>
cudaError_t launch_paged(const paged_attention_args& a, int n_split, int chunk, float* work, bool grouped,
                         cudaStream_t stream) {
  // Partials follow the split counters at the start of work.
  float* part = n_split > 1 ? work + k_split_counters : nullptr;
  const int G = a.n_head / a.n_head_kv;
  if (grouped) {
    const int n_sub = (G + k_group_heads - 1) / k_group_heads;
    const dim3 grid(static_cast<unsigned>(a.n_tok * a.n_head_kv * n_sub), static_cast<unsigned>(n_split));
    return launch_pdl(paged_attention_kernel<DPL, T, k_group_heads>, grid, dim3(32 * k_warps), stream, a, n_split,
                      chunk, part);
  }
  const dim3 grid(static_cast<unsigned>(a.n_tok * a.n_head), static_cast<unsigned>(n_split));
  return launch_pdl(paged_attention_kernel<DPL, T, 1>, grid, dim3(32 * k_warps), stream, a, n_split, chunk, part);
}

template <class T>
cudaError_t launch_paged_t(const paged_attention_args& a, int n_split, int chunk, float* work, bool grouped,
                           cudaStream_t stream) {
  switch (a.head_dim) {
    case 32: return launch_paged<1, T>(a, n_split, chunk, work, grouped, stream);
    case 64: return launch_paged<2, T>(a, n_split, chunk, work, grouped, stream);
    case 128: return launch_paged<4, T>(a, n_split, chunk, work, grouped, stream);
    case 256: return launch_paged<8, T>(a, n_split, chunk, work, grouped, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_store_kv(const float* k, const float* v, void* k_cache, void* v_cache, ggml_type cache_type,
                            const int32_t* slots, int n_tok, int row_elems, cudaStream_t stream) {
  if (n_tok < 0 || n_tok > 65535 || row_elems <= 0) return cudaErrorInvalidValue;
  if (n_tok == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((row_elems + 255) / 256), static_cast<unsigned>(n_tok));
  if (cache_type == ggml_type::f16)
    store_kv_kernel<uint16_t><<<grid, 256, 0, stream>>>(k, v, static_cast<uint16_t*>(k_cache),
                                                         static_cast<uint16_t*>(v_cache), slots, row_elems);
  else if (cache_type == ggml_type::f32)
    store_kv_kernel<float><<<grid, 256, 0, stream>>>(k, v, static_cast<float*>(k_cache),
                                                      static_cast<float*>(v_cache), slots, row_elems);
  else if (cache_type == ggml_type::q8_0 && row_elems % 32 == 0) {
    const int64_t n_blocks = int64_t{n_tok} * 2 * (row_elems / 32);
    auto* kc = static_cast<uint8_t*>(k_cache);
    auto* vc = static_cast<uint8_t*>(v_cache);
    if (n_blocks >= k_q8_thread_min_blocks) {
      store_kv_q8_0_rows_kernel<<<static_cast<unsigned>((n_blocks + 127) / 128), 128, 0, stream>>>(
          k, v, kc, vc, slots, n_tok, row_elems);
    } else {
      const auto ctas = static_cast<unsigned>((n_blocks + k_q8_store_warps - 1) / k_q8_store_warps);
      store_kv_q8_0_kernel<<<ctas, 32 * k_q8_store_warps, 0, stream>>>(k, v, kc, vc, slots, n_tok, row_elems);
    }
  } else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t launch_qk_rope_store(const qk_rope_store_args& a, cudaStream_t stream) {
  if (a.n_tok < 0 || a.n_head <= 0 || a.n_head_kv <= 0 || !qk_rope_store_fits(a.head_dim, a.rope_dim))
    return cudaErrorInvalidValue;
  const int64_t rows = static_cast<int64_t>(a.n_tok) * (a.n_head + 2 * a.n_head_kv);
  if (rows == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((rows + k_rope_warps - 1) / k_rope_warps)), block(32 * k_rope_warps);
  if (a.cache_type == ggml_type::f16) return launch_pdl(qk_rope_store_kernel<uint16_t>, grid, block, stream, a);
  if (a.cache_type == ggml_type::f32) return launch_pdl(qk_rope_store_kernel<float>, grid, block, stream, a);
  if (a.cache_type == ggml_type::q8_0) return launch_pdl(qk_rope_store_kernel<q8_row>, grid, block, stream, a);
  return cudaErrorInvalidValue;
}

namespace {

// TANDEM_ATTN_SPLIT_KEYS=N (N >= 16), to measure: N keys a split for every short cache, in
// place of k_split_keys and the shortest caches' k_fill_split_keys. 0: unset.
int split_keys_override() {
  static const int keys = [] {
    const char* e = std::getenv("TANDEM_ATTN_SPLIT_KEYS");
    const int v = e ? std::atoi(e) : 0;
    return v >= 16 ? v : 0;
  }();
  return keys;
}

// Keys per split past k_short_splits splits of deep_split_keys(): at 16k-64k keys, 32 splits
// left each warp walking hundreds of runs of k_keys in series while the GPU held too few blocks
// to hide it (24 heads x 32 splits is 1.2 waves of 5 blocks/SM on 132 SMs at head_dim 256).
// 256 keys is 16 runs a warp and several waves of blocks. TANDEM_ATTN_DEEP_SPLIT_KEYS=N
// overrides it (N >= 64), to measure.
int deep_split_keys() {
  static const int keys = [] {
    const char* e = std::getenv("TANDEM_ATTN_DEEP_SPLIT_KEYS");
    const int v = e ? std::atoi(e) : 0;
    return v >= 64 ? v : 256;
  }();
  return keys;
}

// Whether a launch takes grouped blocks: for GQA models on deep caches. On short ones, a block
// per query head was faster (Qwen3-8B Q4_K_M tg128 on an H200: 437.6 against 401.2 t/s at depth
// 0, 370.2 against 352.9 at 2048; at 16384, 208.3 against 249.7): fewer blocks then leave the GPU
// short of work. TANDEM_ATTN_GROUPED=0 never groups, =1 always does, to measure.
bool decode_grouped(const paged_attention_args& a) {
  static const int env = [] {
    const char* e = std::getenv("TANDEM_ATTN_GROUPED");
    return e && (e[0] == '0' || e[0] == '1') ? e[0] - '0' : -1;
  }();
  const int mode = a.grouped >= 0 ? a.grouped : env;
  if (a.n_head == a.n_head_kv || mode == 0) return false;
  return mode == 1 || a.max_kv > k_short_splits * deep_split_keys();
}

// Whether a launch takes the tensor-core kernel (kernels/attention_deep.cu: f16 caches, sm_80+):
// on deep caches, where the grouped blocks would otherwise take over. Measured on an H200,
// Qwen3-8B Q4_K_M f16 tg128 at depth 16384: 313.98 against the grouped kernel's 288.53 t/s, and
// with programmatic dependent launch off (as on sm_80-sm_89) 296.75 against 270.66.
// TANDEM_ATTN_DEEP=0 or args.deep = 0 never takes it, =1 always does where supported.
bool decode_deep(const paged_attention_args& a) {
  static const int env = [] {
    const char* e = std::getenv("TANDEM_ATTN_DEEP");
    return e && (e[0] == '0' || e[0] == '1') ? e[0] - '0' : -1;
  }();
  const int mode = a.deep >= 0 ? a.deep : env;
  if (mode == 0 || !paged_deep_supported(a) || kernel_arch() < 80) return false;
  return mode == 1 || (a.n_head != a.n_head_kv && a.max_kv > k_short_splits * deep_split_keys());
}

}  // namespace

size_t paged_attention_work_floats(int n_tok, int n_head, int head_dim, int n_split) {
  return k_split_counters + static_cast<size_t>(n_tok) * n_head * n_split * (head_dim + 2);
}

size_t paged_attention_step_work_floats(int n_tok, int n_head, int head_dim) {
  const int64_t pairs = static_cast<int64_t>(n_tok) * n_head;
  const int64_t slots = std::min<int64_t>(pairs * k_paged_max_splits, k_paged_split_slots);
  return k_split_counters + static_cast<size_t>(std::max<int64_t>(slots, 0)) * (head_dim + 2);
}

int paged_attention_splits(int n_tok, int n_head, int head_dim, int max_kv, size_t work_floats) {
  const int64_t pairs = static_cast<int64_t>(n_tok) * n_head;
  if (pairs <= 0 || pairs >= k_split_counters || max_kv <= 0 || work_floats <= k_split_counters) return 1;
  // Short caches: k_split_keys keys a split, as many splits as fill a large GPU (about 2048
  // blocks), at most k_short_splits. Decode at up to 2048 keys was tuned on this rule. The
  // shortest (up to k_fill_keys: a step's first bucket) also take splits of down to
  // k_fill_split_keys keys until there are about k_fill_blocks blocks (not under
  // TANDEM_ATTN_SPLIT_KEYS): at 4 splits of 64 a 32-head model's one sequence ran 128 blocks on
  // 132 SMs, each warp walking four runs of keys one after another (tg128 on an H100:
  // Qwen3-30B-A3B shape +1.5%, Qwen3-8B +0.3%; at 1024 keys 32-key splits lost;
  // docs/PERFORMANCE.md).
  const int over = split_keys_override(), keys = over ? over : k_split_keys;
  const int64_t fill_splits = (max_kv + k_fill_split_keys - 1) / k_fill_split_keys;
  const int64_t fill = !over && max_kv <= k_fill_keys ? std::min<int64_t>(fill_splits, k_fill_blocks / pairs) : 0;
  int64_t n = std::min<int64_t>({std::max<int64_t>((max_kv + keys - 1) / keys, fill), 2048 / pairs + 1,
                                 k_short_splits});
  // Deep caches: runs of deep_split_keys() keys, within the split and partial-slot limits. It
  // only takes over past k_short_splits full runs, so it never adds splits to a short cache.
  const int deep_keys = deep_split_keys();
  if (max_kv > static_cast<int64_t>(k_short_splits) * deep_keys) {
    const int64_t deep = std::min<int64_t>(
        {(max_kv + deep_keys - 1) / deep_keys, k_paged_max_splits, k_paged_split_slots / pairs});
    n = std::max(n, deep);
  }
  const size_t fit = (work_floats - k_split_counters) / (static_cast<size_t>(pairs) * (head_dim + 2));
  n = std::min<int64_t>(n, static_cast<int64_t>(fit));
  return n > 1 ? static_cast<int>(n) : 1;
}

cudaError_t launch_paged_attention(const paged_attention_args& a, float* work, size_t work_floats,
                                   cudaStream_t stream) {
  if (a.n_tok < 0 || a.n_head <= 0 || a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0 || a.block_size <= 0 ||
      a.max_kv < 0)
    return cudaErrorInvalidValue;
  if (a.n_tok == 0 || a.max_kv == 0) return cudaSuccess;
  if (static_cast<int64_t>(a.n_tok) * a.n_head > 0x7fffffff) return cudaErrorInvalidValue;
  // Enough blocks to fill a large GPU: split long caches when there are few (token, head) pairs.
  const int n_split = paged_attention_splits(a.n_tok, a.n_head, a.head_dim, a.max_kv, work ? work_floats : 0);
  const int chunk = (a.max_kv + n_split - 1) / n_split;
  if (decode_deep(a)) return launch_paged_deep(a, n_split, chunk, work, stream);
  const bool grouped = decode_grouped(a);
  if (a.cache_type == ggml_type::f16) return launch_paged_t<uint16_t>(a, n_split, chunk, work, grouped, stream);
  if (a.cache_type == ggml_type::f32) return launch_paged_t<float>(a, n_split, chunk, work, grouped, stream);
  if (a.cache_type == ggml_type::q8_0) return launch_paged_t<q8_row>(a, n_split, chunk, work, grouped, stream);
  return cudaErrorInvalidValue;
}

}  // namespace tandem
