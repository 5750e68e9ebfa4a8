// Byte layouts of the ggml quant blocks (ggml-common.h). Plain C++17 so that CUDA code
// includes the same definitions as the CPU code. fp16 fields are raw IEEE half bits.
#pragma once

#include <cstdint>

namespace tandem {

constexpr int qk_small = 32;  // block size of Q4_0 .. Q8_1
constexpr int qk_k = 256;     // super-block size of the K-quants
constexpr int k_scale_size = 12;

struct block_q4_0 {
  uint16_t d;
  uint8_t qs[qk_small / 2];
};
struct block_q4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[qk_small / 2];
};
struct block_q5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[qk_small / 2];
};
struct block_q5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[qk_small / 2];
};
struct block_q8_0 {
  uint16_t d;
  int8_t qs[qk_small];
};
struct block_q4_k {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[k_scale_size];
  uint8_t qs[qk_k / 2];
};
struct block_q5_k {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[k_scale_size];
  uint8_t qh[qk_k / 8];
  uint8_t qs[qk_k / 2];
};
struct block_q6_k {
  uint8_t ql[qk_k / 2];
  uint8_t qh[qk_k / 4];
  int8_t scales[qk_k / 16];
  uint16_t d;
};

static_assert(sizeof(block_q4_0) == 18);
static_assert(sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22);
static_assert(sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q4_k) == 144);
static_assert(sizeof(block_q5_k) == 176);
static_assert(sizeof(block_q6_k) == 210);

}  // namespace tandem
