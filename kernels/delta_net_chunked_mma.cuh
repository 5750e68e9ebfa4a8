// fp32-accurate warp products on tf32 tensor cores (sm_80+) for the chunked delta rule's kernels:
// each operand splits as x = hi + lo (both tf32) and a product sums lo*hi + hi*lo + hi*hi ("3xTF32").
#pragma once

#include <cstdint>

namespace tandem::dn {

// x = hi + lo, both tf32: hi is x with its low 13 mantissa bits cleared, so x - hi is exact in
// fp32, and lo is that difference cut to tf32 likewise: lo's error is under 2^-10 of lo, 2^-20 of
// x, as is the dropped lo*lo term. Two bit masks and a subtraction: rounding both parts instead
// (cvt.rna.tf32, 2^-22) left kernel B 29% slower at 2048 tokens on an H200 (280.6 against 218.3
// us; it is issue-bound, two warps a scheduler) for errors the tests cannot tell apart.
struct tf32_a {
  uint32_t hi[4], lo[4];
};
struct tf32_b {
  uint32_t hi[2], lo[2];
};

__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr uint32_t k_tf32 = 0xffffe000u;
  hi = __float_as_uint(x) & k_tf32;
  lo = __float_as_uint(x - __uint_as_float(hi)) & k_tf32;
#else
  hi = __float_as_uint(x), lo = 0u;
#endif
}

// Lane (g, t) = (lane / 4, lane % 4) of m16n8k8 .tf32 (PTX ISA "Matrix Fragments for mma.m16n8k8"):
// A 16 x 8: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); B 8 x 8: b0 (t, g),
// b1 (t + 4, g); C 16 x 8: c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1).
__device__ __forceinline__ int lane_g() { return threadIdx.x % 32 / 4; }
__device__ __forceinline__ int lane_t() { return threadIdx.x % 4; }
__device__ __forceinline__ int frag_c_row(int i) { return lane_g() + 8 * (i >> 1); }
__device__ __forceinline__ int frag_c_col(int i) { return 2 * lane_t() + (i & 1); }

// A(r, k) = a[r * lda + k].
__device__ __forceinline__ tf32_a frag_a(const float* a, int lda) {
  const int g = lane_g(), t = lane_t();
  tf32_a f;
  split_tf32(a[g * lda + t], f.hi[0], f.lo[0]);
  split_tf32(a[(g + 8) * lda + t], f.hi[1], f.lo[1]);
  split_tf32(a[g * lda + t + 4], f.hi[2], f.lo[2]);
  split_tf32(a[(g + 8) * lda + t + 4], f.hi[3], f.lo[3]);
  return f;
}

// A(r, k) = at[k * ld + r]: the transpose of a row-major [8][16] block.
__device__ __forceinline__ tf32_a frag_a_t(const float* at, int ld) {
  const int g = lane_g(), t = lane_t();
  tf32_a f;
  split_tf32(at[t * ld + g], f.hi[0], f.lo[0]);
  split_tf32(at[t * ld + g + 8], f.hi[1], f.lo[1]);
  split_tf32(at[(t + 4) * ld + g], f.hi[2], f.lo[2]);
  split_tf32(at[(t + 4) * ld + g + 8], f.hi[3], f.lo[3]);
  return f;
}

// B(k, n) = b[k * ldb + n] * (k < 4 ? s0 : s1), s0 and s1 being the scales of rows t and t + 4 (1:
// none); rows scaled by a diagonal, as the state update's exp(c_last - c_j).
__device__ __forceinline__ tf32_b frag_b(const float* b, int ldb, float s0 = 1.f, float s1 = 1.f) {
  const int g = lane_g(), t = lane_t();
  tf32_b f;
  split_tf32(b[t * ldb + g] * s0, f.hi[0], f.lo[0]);
  split_tf32(b[(t + 4) * ldb + g] * s1, f.hi[1], f.lo[1]);
  return f;
}

// B(k, n) = bt[n * ldb + k]: B read from its transpose (row-major [8][..]), as K^T in the Gram products.
__device__ __forceinline__ tf32_b frag_b_t(const float* bt, int ldb) {
  const int g = lane_g(), t = lane_t();
  tf32_b f;
  split_tf32(bt[g * ldb + t], f.hi[0], f.lo[0]);
  split_tf32(bt[g * ldb + t + 4], f.hi[1], f.lo[1]);
  return f;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// c += a b to about fp32's accuracy; the small terms first, so they are not lost below hi*hi's ulp.
__device__ __forceinline__ void mma_3xtf32(float (&c)[4], const tf32_a& a, const tf32_b& b) {
  mma_tf32(c, a.lo, b.hi);
  mma_tf32(c, a.hi, b.lo);
  mma_tf32(c, a.hi, b.hi);
}

// Test hook: one warp computes c = c0 + a diag(s) b (a 16 x 8, row-major; at: a's transpose, 8 x 16;
// b 8 x 8; bt: (diag(s) b)'s transpose; s 8) in 3xTF32 through the fragment helpers the kernels use:
// c[0..127] from frag_a and frag_b, c[128..255] from frag_a_t and frag_b, c[256..383] from frag_a
// and frag_b_t.
static __global__ void mma_tile_test_kernel(const float* a, const float* at, const float* b, const float* bt,
                                            const float* s, const float* c0, float* c) {
  const int t = lane_t();
  for (int pass = 0; pass < 3; ++pass) {
    const tf32_a fa = pass == 1 ? frag_a_t(at, 16) : frag_a(a, 8);
    const tf32_b fb = pass == 2 ? frag_b_t(bt, 8) : frag_b(b, 8, s[t], s[t + 4]);
    float acc[4];
    for (int i = 0; i < 4; ++i) acc[i] = c0[frag_c_row(i) * 8 + frag_c_col(i)];
    mma_3xtf32(acc, fa, fb);
    for (int i = 0; i < 4; ++i) c[pass * 128 + frag_c_row(i) * 8 + frag_c_col(i)] = acc[i];
  }
}

}  // namespace tandem::dn
