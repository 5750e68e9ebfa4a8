// The warpgroup tensor-core instructions of sm_90a (wgmma.mma_async) for blocks whose A operand is
// decoded into registers and whose B operand (x, 16-bit) sits in shared memory. They exist only in
// the arch-specific sm_90a pass (CMake's "90a"); TANDEM_WGMMA says whether this pass has them, and
// every caller keeps its mma.sync form for the others.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TANDEM_WGMMA 1
#else
#define TANDEM_WGMMA 0
#endif

namespace tandem::wg {

// B's shared-memory layout (K-major, no swizzle): 8 x 8 "core matrices" of 8 rows (tokens) of 16
// bytes (8 k values); a k16 step is two cores along k, LBO bytes apart, and the token groups of 8
// lie SBO bytes apart. The descriptor holds those and the start address, each in 16-byte units.
__device__ __forceinline__ uint64_t desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return uint64_t((a & 0x3ffffu) >> 4) | uint64_t((lbo >> 4) & 0x3fffu) << 16 | uint64_t((sbo >> 4) & 0x3fffu) << 32;
}

#if TANDEM_WGMMA
// Orders this thread's register writes (A fragments, accumulators) before the next wgmma reads them.
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Until at most N of this warpgroup's committed groups are still running.
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared-memory writes of the generic proxy (st.shared, cp.async) made visible to wgmma's reads.
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps a register the compiler might reuse alive, in place, until here (an operand of an
// unfinished wgmma is still being read after its asm statement).
__device__ __forceinline__ void keep(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void keep(float& r) { asm volatile("" : "+f"(r)::"memory"); }
#else
__device__ __forceinline__ void fence() {}
__device__ __forceinline__ void commit() {}
template <int N>
__device__ __forceinline__ void wait() {}
__device__ __forceinline__ void proxy_fence() {}
__device__ __forceinline__ void keep(uint32_t&) {}
__device__ __forceinline__ void keep(float&) {}
#endif

// d (64 x N fp32, the m64nNk16 accumulator: warp w of the warpgroup, lane (g, t), holds rows 16w + g
// and 16w + g + 8, columns 8i + 2t, 8i + 2t + 1 in d[i][0..1] and d[i][2..3]: mma16816's C tiles
// side by side) += a (64 x 16 fp16: this warp's 16 rows in mma16816's A layout) times B (16 x N,
// descriptor b). Compiles to nothing outside the sm_90a pass.
template <int N>
__device__ __forceinline__ void mma(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b);

#if TANDEM_WGMMA
#define TANDEM_WG_D4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
template <>
__device__ __forceinline__ void mma<64>(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,"
      "%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
      : TANDEM_WG_D4(0), TANDEM_WG_D4(1), TANDEM_WG_D4(2), TANDEM_WG_D4(3), TANDEM_WG_D4(4), TANDEM_WG_D4(5),
        TANDEM_WG_D4(6), TANDEM_WG_D4(7)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
template <>
__device__ __forceinline__ void mma<32>(float (&d)[4][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
      : TANDEM_WG_D4(0), TANDEM_WG_D4(1), TANDEM_WG_D4(2), TANDEM_WG_D4(3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
template <>
__device__ __forceinline__ void mma<16>(float (&d)[2][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
      : TANDEM_WG_D4(0), TANDEM_WG_D4(1)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
#undef TANDEM_WG_D4
#else
template <int N>
__device__ __forceinline__ void mma(float (&)[N / 8][4], const uint32_t (&)[4], uint64_t) {}
#endif

}  // namespace tandem::wg
