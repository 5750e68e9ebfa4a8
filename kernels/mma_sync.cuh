// The warp-level tensor-core instructions of sm_80+ (mma.sync m16n8k16, ldmatrix) for the blocks
// that keep fragments in registers: below sm_80 they compile to nothing and are never launched.
#pragma once

#include <cstdint>

namespace tandem {

// c += a · b: A 16 × 16 fp16 row-major (lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8,
// columns 2t, 2t + 1 and 2t + 8, 2t + 9), B 16 × 8 column-major (b0: rows 2t, 2t + 1 of column g;
// b1: rows 2t + 8, 2t + 9), C 16 × 8 fp32 (c0, c1: row g, columns 2t, 2t + 1; c2, c3: row g + 8).
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// c += a · b with k = 8: A 16 × 8 (a0: row g, columns 2t, 2t + 1; a1: row g + 8), B 8 × 8
// column-major (rows 2t, 2t + 1 of column g), C as mma16816. A's layout is C's: a 16 × 8 fp32
// accumulator tile, packed to fp16 pairs, is the A operand of the next product.
__device__ __forceinline__ void mma1688(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(b0));
#endif
}

// Four 8 × 8 fp16 matrices from shared memory: lanes 8i..8i+7 give the row addresses of matrix i,
// and r[i] holds this lane's pair of it (row lane / 4, columns 2 (lane % 4), +1); .trans hands out
// the transpose (rows 2 (lane % 4), +1 of column lane / 4).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(row))));
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(row))));
#endif
}

}  // namespace tandem
