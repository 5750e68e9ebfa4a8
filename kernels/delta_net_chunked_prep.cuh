// Kernel A of the chunked delta rule on tf32 tensor cores (sm_80+, 3xTF32) and its switch:
// kernels/delta_net_chunked.cu includes this inside its anonymous namespace, after kernel B's stage_rows.
#pragma once

// One block of 8 warps per (chunk, v-head, run), as the fp32 kernel A, with the same outputs; its
// chain of serial steps is what a short run waits on, so the chunk's k, q (and later v) rows come in
// whole by cp.async and every product is a warp product:
//   1. gates, cumulative decays c; the L2 scales of k and q from shared memory;
//   2. K K^T and Q K^T of the raw rows (scaled after): L = beta (k_i . k_j) exp(c_i - c_j) (j < i)
//      into shared memory, M = (q_i . k_j) exp(c_i - c_j) (j <= i) out;
//   3. T = (I + L)^-1 by 16 x 16 blocks: the diagonal blocks by forward substitution (a thread per
//      column), then T_ij = -T_ii (sum_k L_ik T_kj) for i - j = 1, 2, 3 (two small fp32 products each);
//   4. [U | W] = T diag(s) [v | k] (s: beta, beta exp(c) / |k|), one mma product with no serial chain.
// The fp32 kernel's forward substitution ran a 2016-step dependent chain per column; here the longest
// chain is the diagonal blocks' 120 steps.
constexpr int k_lt_stride = k_chunk + 4;  // L, T rows: row-indexed fragment reads want 4 mod 32

// Float offsets of kernel A's dynamic shared memory. K and Q are read row-indexed (A and B^T
// fragments: stride 4 mod 32); V, which replaces Q once the Gram products are done, column-indexed
// (stride 8 mod 32). K's column-indexed reads in step 4 take a 2-way bank conflict.
struct prep_mma_smem {
  int k_stride, q_stride, v_stride;
  int k, qv, l, t, beta, c, kinv, qinv, ks, total;
};

__host__ __device__ inline prep_mma_smem prep_mma_smem_for(int dk, int dv) {
  prep_mma_smem l;
  l.k_stride = dk + 4, l.q_stride = dk + 4, l.v_stride = dv + 8;
  l.k = 0;
  l.qv = l.k + k_chunk * l.k_stride;
  l.l = l.qv + k_chunk * (l.q_stride > l.v_stride ? l.q_stride : l.v_stride);
  l.t = l.l + k_chunk * k_lt_stride;
  l.beta = l.t + k_chunk * k_lt_stride;
  l.c = l.beta + k_chunk;
  l.kinv = l.c + k_chunk;
  l.qinv = l.kinv + k_chunk;
  l.ks = l.qinv + k_chunk;  // beta exp(c) / |k|: W's row scales
  l.total = l.ks + k_chunk;
  return l;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
static_assert(k_prep_threads == k_mma_threads, "stage_rows strides by k_mma_threads");

// stage_rows (16-byte copies) where the rows are 16-byte aligned, else the same by 4-byte copies (the
// tests' q | k | v rows lie 4n + 3 floats apart).
__device__ void stage_rows_any(float* dst, int ld, const float* src, int64_t stride, int cols, int n, bool aligned) {
  if (aligned) return stage_rows(dst, ld, src, stride, cols, n);
  for (int e = threadIdx.x; e < k_chunk * cols; e += k_prep_threads) {
    const int i = e / cols, c = e % cols;
    const bool in = i < n;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                     static_cast<uint32_t>(__cvta_generic_to_shared(dst + i * ld + c))),
                 "l"(in ? src + i * stride + c : src), "r"(in ? 4 : 0));
  }
}

// Threads < 64: beta and the decay of row i, then c_i = g_0 + ... + g_i in the CPU's order (the
// terms past i add exact zeros, so the loop unrolls); g goes through the t area, free until step 3.
__device__ void prep_mma_gates(const dn_rule_args& a, const chunk_pos& p, const chunk_work& cw, float* sm,
                               const prep_mma_smem& l) {
  const int i = threadIdx.x;
  float* g = sm + l.t;
  if (i < k_chunk) {
    float gi = 0.f, b = 0.f;
    if (i < p.n) {
      const int64_t x = (p.row0 + i) * (a.gate_stride ? a.gate_stride : a.Hv) + p.h;
      gi = a.a_decay[p.h] * softplus(a.alpha[x] + a.dt_bias[p.h]);
      b = sigmoid(a.beta[x]);
    }
    g[i] = gi;
    sm[l.beta + i] = b;
  }
  __syncthreads();
  if (i < k_chunk) {
    float cum = 0.f;
#pragma unroll
    for (int j = 0; j < k_chunk; ++j) cum += j <= i ? g[j] : 0.f;
    sm[l.c + i] = cum;
    if (i < p.n) cw.c[p.h * cw.T + p.row0 + i] = cum;
  }
}

// The L2 scales of the staged k and q rows (zero past the chunk's end), four threads a row, summed
// in the fp32 kernel's order; and W's row scales.
__device__ void prep_mma_norms(const dn_rule_args& a, const chunk_pos& p, float* sm, const prep_mma_smem& l) {
  const int i = threadIdx.x / 4, part = threadIdx.x % 4;
  const float* kr = sm + l.k + i * l.k_stride;
  const float* qr = sm + l.qv + i * l.q_stride;
  float sk = 0.f, sq = 0.f;
#pragma unroll 8
  for (int c = part; c < a.dk; c += 4) sk = fmaf(kr[c], kr[c], sk), sq = fmaf(qr[c], qr[c], sq);
#pragma unroll
  for (int o = 1; o < 4; o <<= 1)
    sk += __shfl_xor_sync(0xffffffffu, sk, o), sq += __shfl_xor_sync(0xffffffffu, sq, o);
  if (part == 0) {
    const float kinv = i < p.n ? rsqrtf(sk + a.l2_eps) : 0.f;
    sm[l.kinv + i] = kinv;
    sm[l.qinv + i] = i < p.n ? rsqrtf(sq + a.l2_eps) * rsqrtf(static_cast<float>(a.dk)) : 0.f;
    sm[l.ks + i] = sm[l.beta + i] * expf(sm[l.c + i]) * kinv;
  }
}

// The v-heads h < Hk store their k-head's normalised rows for kernel B (as the fp32 kernel A does).
__device__ void prep_mma_store_normalised(const dn_rule_args& a, const chunk_pos& p, const chunk_work& cw,
                                          const float* sm, const prep_mma_smem& l) {
  if (p.h >= a.Hk) return;
  const int per_row = a.dk / 4;
  for (int e = threadIdx.x; e < p.n * per_row; e += k_prep_threads) {
    const int i = e / per_row, c4 = 4 * (e % per_row);
    const float ks = sm[l.kinv + i], qs = sm[l.qinv + i];
    const float4 k = *reinterpret_cast<const float4*>(sm + l.k + i * l.k_stride + c4);
    const float4 q = *reinterpret_cast<const float4*>(sm + l.qv + i * l.q_stride + c4);
    const int64_t dst = ((p.row0 + i) * a.Hk + p.kh) * a.dk + c4;
    *reinterpret_cast<float4*>(cw.kn + dst) = make_float4(k.x * ks, k.y * ks, k.z * ks, k.w * ks);
    *reinterpret_cast<float4*>(cw.qn + dst) = make_float4(q.x * qs, q.y * qs, q.z * qs, q.w * qs);
  }
}

// Step 2: warp (rt, half) = (warp % 4, warp / 4) computes rows 16 rt.. of K K^T and Q K^T in the
// 8-column tiles 4 half .. 4 half + 3 that reach the diagonal (8 nt <= 16 rt + 15); tiles above it
// stay zero, and the masks below zero what else lies above it. Rows and columns past the chunk's n
// tokens are zero, so their tiles are skipped too (a short run's chunk does a fraction of the work).
__device__ void prep_mma_grams(const dn_rule_args& a, const chunk_pos& p, const chunk_work& cw, float* sm,
                               const prep_mma_smem& l) {
  const int warp = threadIdx.x / 32, rt = warp % 4, nt0 = 4 * (warp / 4);
  const int n_nt = 16 * rt < p.n ? min(4, max(0, min(2 * rt + 2, (p.n + 7) / 8) - nt0)) : 0;
  float kk[4][4] = {}, qk[4][4] = {};
  const float* K = sm + l.k;
  if (n_nt > 0) {
#pragma unroll 2
    for (int k0 = 0; k0 < a.dk; k0 += 8) {
      const dn::tf32_a ak = dn::frag_a(K + 16 * rt * l.k_stride + k0, l.k_stride);
      const dn::tf32_a aq = dn::frag_a(sm + l.qv + 16 * rt * l.q_stride + k0, l.q_stride);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        if (nt < n_nt) {
          const dn::tf32_b b = dn::frag_b_t(K + 8 * (nt0 + nt) * l.k_stride + k0, l.k_stride);
          dn::mma_3xtf32(kk[nt], ak, b);
          dn::mma_3xtf32(qk[nt], aq, b);
        }
    }
  }
  const float* c = sm + l.c;
  const float* kinv = sm + l.kinv;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int i = 16 * rt + dn::frag_c_row(2 * hf);
    const float ci = c[i], bi = sm[l.beta + i] * kinv[i], qi = sm[l.qinv + i];
    float* mrow = cw.m + (p.h * cw.T + p.row0 + i) * k_chunk;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      float lv[2], mv[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = 8 * (nt0 + nt) + dn::frag_c_col(e);
        const float decay = j <= i ? expf(ci - c[j]) : 0.f;
        lv[e] = j < i ? bi * kk[nt][2 * hf + e] * kinv[j] * decay : 0.f;
        mv[e] = qk[nt][2 * hf + e] * qi * kinv[j] * decay;
      }
      const int j0 = 8 * (nt0 + nt) + dn::frag_c_col(0);
      *reinterpret_cast<float2*>(sm + l.l + i * k_lt_stride + j0) = make_float2(lv[0], lv[1]);
      if (i < p.n) *reinterpret_cast<float2*>(mrow + j0) = make_float2(mv[0], mv[1]);
    }
  }
}

// Step 3a, threads < 64: column jj of the diagonal block b's inverse (I + L_bb)^-1, zeros above its
// diagonal included (step 4 reads them).
__device__ void prep_mma_diag_inverse(float* sm, const prep_mma_smem& l) {
  if (threadIdx.x >= k_chunk) return;
  const int b = threadIdx.x / 16, jj = threadIdx.x % 16;
  const float* L = sm + l.l + 16 * b * (k_lt_stride + 1);
  float* T = sm + l.t + 16 * b * (k_lt_stride + 1);
  float x[16];
#pragma unroll
  for (int ii = 0; ii < 16; ++ii) {
    float acc = ii == jj ? 1.f : 0.f;
#pragma unroll
    for (int m = 0; m < ii; ++m) acc = fmaf(-L[ii * k_lt_stride + m], x[m], acc);
    x[ii] = acc;
  }
#pragma unroll
  for (int ii = 0; ii < 16; ++ii) T[ii * k_lt_stride + jj] = x[ii];
}

// Step 3b: the blocks T_ij below the diagonal, i - j = d for d = 1, 2, 3 in turn (each needs the
// nearer ones): P = sum_{k=j}^{i-1} L_ik T_kj goes into T's block (j, i), which nothing reads as T
// (step 4 skips blocks above the diagonal), then T_ij = -T_ii P. A thread an element.
__device__ void prep_mma_offdiag(float* sm, const prep_mma_smem& l) {
  const float* L = sm + l.l;
  float* T = sm + l.t;
  constexpr int s = k_lt_stride;
  for (int d = 1; d < 4; ++d) {
    for (int e = threadIdx.x; e < 256 * (4 - d); e += k_prep_threads) {
      const int j = e / 256, i = j + d, r = e / 16 % 16, c = e % 16;
      float acc = 0.f;
      for (int m = 16 * j; m < 16 * i; ++m) acc = fmaf(L[(16 * i + r) * s + m], T[m * s + 16 * j + c], acc);
      T[(16 * j + r) * s + 16 * i + c] = acc;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 256 * (4 - d); e += k_prep_threads) {
      const int j = e / 256, i = j + d, r = e / 16 % 16, c = e % 16;
      float acc = 0.f;
      for (int m = 0; m <= r; ++m) acc = fmaf(T[(16 * i + r) * s + 16 * i + m], T[(16 * j + m) * s + 16 * i + c], acc);
      T[(16 * i + r) * s + 16 * j + c] = -acc;
    }
    __syncthreads();
  }
}

// Step 4: X = T diag(s) B for B = [v | k] (U and W), warp w on the 32-column groups w, w + 8, .. (v's,
// then k's), all 64 rows: row tile rt meets the k-steps k0 < 16 rt + 16 only (T is lower triangular;
// its blocks above the diagonal hold step 3's scratch). B's rows past the chunk's n tokens are zero,
// so the k-steps from n on and the row tiles from n on (never stored) are skipped.
__device__ void prep_mma_solve(const dn_rule_args& a, const chunk_pos& p, const chunk_work& cw, const float* sm,
                               const prep_mma_smem& l) {
  const int n_groups = (a.dv + a.dk) / 32;
  const float* T = sm + l.t;
  for (int grp = threadIdx.x / 32; grp < n_groups; grp += k_prep_threads / 32) {
    const bool is_v = grp < a.dv / 32;
    const int col0 = is_v ? 32 * grp : 32 * grp - a.dv, ldb = is_v ? l.v_stride : l.k_stride;
    const float* B = sm + (is_v ? l.qv : l.k) + col0;
    const float* s = sm + (is_v ? l.beta : l.ks);
    float acc[4][4][4] = {};
    for (int k0 = 0; k0 < p.n; k0 += 8) {
      const float s0 = s[k0 + dn::lane_t()], s1 = s[k0 + dn::lane_t() + 4];
      dn::tf32_b b[4];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) b[nt] = dn::frag_b(B + k0 * ldb + 8 * nt, ldb, s0, s1);
#pragma unroll
      for (int rt = 0; rt < 4; ++rt)
        if (k0 < 16 * rt + 16 && 16 * rt < p.n) {
          const dn::tf32_a at = dn::frag_a(T + 16 * rt * k_lt_stride + k0, k_lt_stride);
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) dn::mma_3xtf32(acc[rt][nt], at, b[nt]);
        }
    }
    const int width = is_v ? a.dv : a.dk;
    float* dst = (is_v ? cw.u : cw.w) + (p.h * cw.T + p.row0) * width + col0 + dn::frag_c_col(0);
#pragma unroll
    for (int rt = 0; rt < 4; ++rt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int r = 16 * rt + dn::frag_c_row(2 * hf);
        if (r >= p.n) continue;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
          *reinterpret_cast<float2*>(dst + static_cast<int64_t>(r) * width + 8 * nt) =
              make_float2(acc[rt][nt][2 * hf], acc[rt][nt][2 * hf + 1]);
      }
  }
}
#endif

__global__ void __launch_bounds__(k_prep_threads, 2)
    dn_chunk_prep_mma_kernel(const dn_rule_args a, const int32_t* __restrict__ runs, const chunk_work cw) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(16) float smem[];
  pdl_wait();
  const int32_t* run = runs + 4 * blockIdx.z;
  const int t0 = run[0], n_run = run[1];
  const int cb = static_cast<int>(blockIdx.x) * k_chunk;
  if (cb >= n_run) return;  // the whole block: a chunk past this run's end
  const int h = static_cast<int>(blockIdx.y);
  const chunk_pos p{static_cast<int64_t>(t0) + cb, min(k_chunk, n_run - cb), h, h % a.Hk};
  const prep_mma_smem l = prep_mma_smem_for(a.dk, a.dv);
  const int64_t qk_off = p.row0 * a.qk_stride + static_cast<int64_t>(p.kh) * a.dk;
  const bool aligned = (reinterpret_cast<uintptr_t>(a.q) | reinterpret_cast<uintptr_t>(a.k) |
                        reinterpret_cast<uintptr_t>(a.v) | static_cast<uintptr_t>(a.qk_stride | a.v_stride) * 4) %
                           16 == 0;
  stage_rows_any(smem + l.k, l.k_stride, a.k + qk_off, a.qk_stride, a.dk, p.n, aligned);
  stage_rows_any(smem + l.qv, l.q_stride, a.q + qk_off, a.qk_stride, a.dk, p.n, aligned);
  cp_async_commit();
  prep_mma_gates(a, p, cw, smem, l);
  cp_async_wait<0>();
  __syncthreads();  // k, q rows, c and beta
  prep_mma_norms(a, p, smem, l);
  __syncthreads();
  prep_mma_store_normalised(a, p, cw, smem, l);
  prep_mma_grams(a, p, cw, smem, l);
  __syncthreads();  // L complete; q no longer read: v takes its place
  stage_rows_any(smem + l.qv, l.v_stride, a.v + p.row0 * a.v_stride + static_cast<int64_t>(p.h) * a.dv,
                 a.v_stride, a.dv, p.n, aligned);
  cp_async_commit();
  prep_mma_diag_inverse(smem, l);
  __syncthreads();
  prep_mma_offdiag(smem, l);
  cp_async_wait<0>();
  __syncthreads();  // v rows
  prep_mma_solve(a, p, cw, smem, l);
#endif
}

// Which kernel A launch_dn_rule_chunked runs (dn_rule_chunked_debug: 0 the fp32 one, 1 this one
// where it can run, -1 the default choice by run length).
std::atomic<int> g_prep{-1};

bool env_is_zero(const char* name) {
  const char* e = std::getenv(name);
  return e && e[0] == '0' && e[1] == 0;
}

// Runs shorter than this take the fp32 kernel A by default: at 64-256 tokens (16 k-heads, 32
// v-heads, 128 x 128, one H200) the kernel above took 31 us against 28.5-29.4, at 2048 176 against 248.
constexpr int k_prep_mma_min_run = 512;

// The kernel above for runs of k_prep_mma_min_run tokens and more (any length when the debug hook
// asks for it), unless turned off (TANDEM_DN_PREP_MMA=0, or the hook), the kernels were built below
// sm_80, its shared memory (dk = dv = 128: 103 KiB, two blocks an SM on an H100) is more than a
// block may have, or the work is misaligned for float4 stores. longest: the longest run's tokens.
bool use_mma_prep(const dn_rule_args& a, const void* work, int longest) {
  static const bool env_off = env_is_zero("TANDEM_DN_PREP_MMA");
  const int mode = g_prep.load(std::memory_order_relaxed);
  if (mode == 0 || (mode < 0 && (env_off || longest < k_prep_mma_min_run)) || kernel_arch() < 80) return false;
  if (reinterpret_cast<uintptr_t>(work) % 16 != 0) return false;
  const int bytes = prep_mma_smem_for(a.dk, a.dv).total * static_cast<int>(sizeof(float));
  return bytes <= kernel_smem_optin() &&
         allow_dynamic_smem_once<dn_chunk_prep_mma_kernel>(kernel_smem_optin()) == cudaSuccess;
}
