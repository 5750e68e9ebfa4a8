// Known-answer blocks: the bytes are written here by hand from the format description (ggml's
// ggml-common.h / dequantize_row_*), the expected floats come from the format's formula written
// out element by element in a different way than the library's loops. Scales are powers of two so
// every expected value is exact and the comparison is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "quant/quant.h"

namespace {

using tandem::ggml_type;

std::vector<float> decode(ggml_type t, const std::vector<uint8_t>& bytes, int64_t n) {
  EXPECT_EQ(*tandem::row_bytes(t, static_cast<uint64_t>(n)), bytes.size());
  std::vector<float> y(static_cast<size_t>(n), -12345.0f);
  tandem::dequantize_row(t, bytes.data(), y.data(), n);
  return y;
}

void put16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
  b[off] = static_cast<uint8_t>(v & 0xff);
  b[off + 1] = static_cast<uint8_t>(v >> 8);
}

// fp16 bit patterns of the scales used below
constexpr uint16_t h_0_125 = 0x3000, h_0_25 = 0x3400, h_0_5 = 0x3800, h_1 = 0x3c00, h_2 = 0x4000;
constexpr uint16_t h_m1_5 = 0xbe00, h_3 = 0x4200;

TEST(KnownAnswer, F32) {
  const float v[3] = {1.5f, -0.0f, 3e38f};
  std::vector<uint8_t> b(sizeof v);
  std::memcpy(b.data(), v, sizeof v);
  const auto y = decode(ggml_type::f32, b, 3);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_TRUE(std::signbit(y[1]));
  EXPECT_EQ(y[2], 3e38f);
}

TEST(KnownAnswer, F16) {
  std::vector<uint8_t> b(10);
  put16(b, 0, 0x3c00);  // 1
  put16(b, 2, 0xc000);  // -2
  put16(b, 4, 0x0001);  // 2^-24
  put16(b, 6, 0x7bff);  // 65504
  put16(b, 8, 0xfc00);  // -inf
  const auto y = decode(ggml_type::f16, b, 5);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 0x1.0p-24f);
  EXPECT_EQ(y[3], 65504.0f);
  EXPECT_EQ(y[4], -INFINITY);
}

TEST(KnownAnswer, Bf16) {
  std::vector<uint8_t> b(6);
  put16(b, 0, 0x3f80);  // 1
  put16(b, 2, 0xc040);  // -3
  put16(b, 4, 0x0001);  // 2^-133 (subnormal)
  const auto y = decode(ggml_type::bf16, b, 3);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
  EXPECT_EQ(y[2], 0x1.0p-133f);
}

// Q4_0, 18 bytes: d (fp16), qs[16]; value j<16 is the low nibble of qs[j], j>=16 the high
// nibble of qs[j-16]; y = d*(nibble - 8). Two blocks to check the stride.
TEST(KnownAnswer, Q4_0) {
  std::vector<uint8_t> b(36);
  put16(b, 0, h_0_5);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  put16(b, 18, h_2);
  for (int j = 0; j < 16; ++j) b[20 + j] = 0x8f;  // low 15, high 8
  const auto y = decode(ggml_type::q4_0, b, 64);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(y[16 + j], 0.5f * static_cast<float>(7 - j)) << j;
    EXPECT_EQ(y[32 + j], 14.0f);
    EXPECT_EQ(y[48 + j], 0.0f);
  }
}

// Q4_1, 20 bytes: d, m, qs[16]; y = d*nibble + m.
TEST(KnownAnswer, Q4_1) {
  std::vector<uint8_t> b(20);
  put16(b, 0, h_0_25);
  put16(b, 2, h_m1_5);
  for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>((j * 5 % 16) | (j << 4));
  const auto y = decode(ggml_type::q4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.25f * static_cast<float>(j * 5 % 16) - 1.5f) << j;
    EXPECT_EQ(y[16 + j], 0.25f * static_cast<float>(j) - 1.5f) << j;
  }
}

// 5th bit of value j (0..31) of Q5_0 / Q5_1: bit (j % 8) of qh byte j / 8 (qh is a little-endian
// u32 whose bit j belongs to value j).
int qh_bit(const uint8_t* qh, int j) { return (qh[j / 8] >> (j % 8)) & 1; }

// Q5_0, 22 bytes: d, qh[4], qs[16]; y = d*((nibble | bit<<4) - 16).
TEST(KnownAnswer, Q5_0) {
  std::vector<uint8_t> b(22);
  put16(b, 0, h_0_125);
  const uint8_t qh[4] = {0xa5, 0x0f, 0x00, 0xf1};
  std::memcpy(&b[2], qh, 4);
  for (int j = 0; j < 16; ++j) b[6 + j] = static_cast<uint8_t>((15 - j) | (j << 4));
  const auto y = decode(ggml_type::q5_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.125f * static_cast<float>((15 - j) + 16 * qh_bit(qh, j) - 16)) << j;
    EXPECT_EQ(y[16 + j], 0.125f * static_cast<float>(j + 16 * qh_bit(qh, j + 16) - 16)) << j;
  }
  // spot checks written out: value 0: nibble 15, qh bit0 of 0xa5 = 1 -> 31-16 = 15
  EXPECT_EQ(y[0], 0.125f * 15);
  // value 1: nibble 14, bit1 of 0xa5 = 0 -> -2
  EXPECT_EQ(y[1], 0.125f * -2);
  // value 16: high nibble of qs[0] = 0, qh bit 16 (byte 2) = 0 -> -16
  EXPECT_EQ(y[16], 0.125f * -16);
  // value 31: high nibble of qs[15] = 15, qh bit 31 (byte 3 bit 7 of 0xf1) = 1 -> 15
  EXPECT_EQ(y[31], 0.125f * 15);
  // value 24: high nibble of qs[8] = 8, qh bit 24 (byte 3 bit 0) = 1 -> 8
  EXPECT_EQ(y[24], 0.125f * 8);
}

// Q5_1, 24 bytes: d, m, qh[4], qs[16]; y = d*(nibble | bit<<4) + m.
TEST(KnownAnswer, Q5_1) {
  std::vector<uint8_t> b(24);
  put16(b, 0, h_0_5);
  put16(b, 2, h_3);
  const uint8_t qh[4] = {0x3c, 0x81, 0xff, 0x10};
  std::memcpy(&b[4], qh, 4);
  for (int j = 0; j < 16; ++j) b[8 + j] = static_cast<uint8_t>(j | (j << 4));
  const auto y = decode(ggml_type::q5_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j + 16 * qh_bit(qh, j)) + 3.0f) << j;
    EXPECT_EQ(y[16 + j], 0.5f * static_cast<float>(j + 16 * qh_bit(qh, j + 16)) + 3.0f) << j;
  }
  EXPECT_EQ(y[2], 0.5f * 18 + 3.0f);   // bit 2 of 0x3c set
  EXPECT_EQ(y[15], 0.5f * 31 + 3.0f);  // bit 15 = byte 1 bit 7 of 0x81
  EXPECT_EQ(y[28], 0.5f * 28 + 3.0f);  // bit 28 = byte 3 bit 4 of 0x10, nibble 12 -> 28
}

// Q8_0, 34 bytes: d, int8 qs[32]; y = d*q.
TEST(KnownAnswer, Q8_0) {
  std::vector<uint8_t> b(34);
  put16(b, 0, h_0_125);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
  const auto y = decode(ggml_type::q8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.125f * static_cast<float>(j * 8 - 128)) << j;
}

// K-quant sub-block scales/mins used by the Q4_K and Q5_K blocks below, and their 12 packed bytes
// worked out by hand from the layout: bytes 0-3 = scale j (6 bits) | top 2 bits of scale j+4 in
// bits 6-7; bytes 4-7 = min j | top 2 bits of min j+4; bytes 8-11 = low 4 bits of scale j+4 |
// low 4 bits of min j+4 in the high nibble.
constexpr int k_sc[8] = {1, 8, 15, 22, 29, 36, 43, 50};
constexpr int k_mn[8] = {63, 58, 53, 48, 43, 38, 33, 28};
constexpr uint8_t k_scale_bytes[12] = {
    1 + (1 << 6),    // sc0=1,  sc4=29=0b01'1101 -> top bits 01
    8 + (2 << 6),    // sc1=8,  sc5=36=0b10'0100 -> 10
    15 + (2 << 6),   // sc2=15, sc6=43=0b10'1011 -> 10
    22 + (3 << 6),   // sc3=22, sc7=50=0b11'0010 -> 11
    63 + (2 << 6),   // m0=63,  m4=43 -> 10
    58 + (2 << 6),   // m1=58,  m5=38=0b10'0110 -> 10
    53 + (2 << 6),   // m2=53,  m6=33=0b10'0001 -> 10
    48 + (1 << 6),   // m3=48,  m7=28=0b01'1100 -> 01
    13 + (11 << 4),  // sc4 low 1101, m4 low 1011
    4 + (6 << 4),    // sc5 low 0100, m5 low 0110
    11 + (1 << 4),   // sc6 low 1011, m6 low 0001
    2 + (12 << 4),   // sc7 low 0010, m7 low 1100
};

// Q4_K, 144 bytes: d, dmin, scales[12], qs[128]. Value e: chunk c = e/64, r = e%64; r<32 is the
// low nibble of qs[32c+r] in sub-block 2c, else the high nibble of qs[32c+r-32] in sub-block
// 2c+1; y = d*sc*q - dmin*m.
TEST(KnownAnswer, Q4_K) {
  std::vector<uint8_t> b(144);
  put16(b, 0, h_0_5);
  put16(b, 2, h_0_25);
  std::memcpy(&b[4], k_scale_bytes, 12);
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>(i * 37 + 11);
  const auto y = decode(ggml_type::q4_k, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, r = e % 64;
    const int sub = r < 32 ? 2 * c : 2 * c + 1;
    const uint8_t byte = b[16 + 32 * c + r % 32];
    const int q = r < 32 ? (byte & 15) : (byte >> 4);
    EXPECT_EQ(y[e], 0.5f * static_cast<float>(k_sc[sub] * q) - 0.25f * static_cast<float>(k_mn[sub])) << e;
  }
  // written out: value 0 -> qs[0] = 11 -> low nibble 11, sub 0: 0.5*1*11 - 0.25*63
  EXPECT_EQ(y[0], 5.5f - 15.75f);
  // value 255 -> chunk 3, r 63 -> high nibble of qs[127] = (127*37+11)&255 = 102 = 0x66 -> 6, sub 7
  EXPECT_EQ(y[255], 0.5f * 50 * 6 - 0.25f * 28);
}

// Q5_K, 176 bytes: d, dmin, scales[12], qh[32], qs[128]; as Q4_K plus 16 when bit 2c (r<32) or
// 2c+1 (r>=32) of qh[r%32] is set.
TEST(KnownAnswer, Q5_K) {
  std::vector<uint8_t> b(176);
  put16(b, 0, h_0_25);
  put16(b, 2, h_0_5);
  std::memcpy(&b[4], k_scale_bytes, 12);
  for (int i = 0; i < 32; ++i) b[16 + i] = static_cast<uint8_t>(i * 73 + 5);
  for (int i = 0; i < 128; ++i) b[48 + i] = static_cast<uint8_t>(255 - i * 3);
  const auto y = decode(ggml_type::q5_k, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int c = e / 64, r = e % 64;
    const int sub = r < 32 ? 2 * c : 2 * c + 1;
    const uint8_t byte = b[48 + 32 * c + r % 32];
    const int bit = (b[16 + r % 32] >> (r < 32 ? 2 * c : 2 * c + 1)) & 1;
    const int q = (r < 32 ? (byte & 15) : (byte >> 4)) + 16 * bit;
    EXPECT_EQ(y[e], 0.25f * static_cast<float>(k_sc[sub] * q) - 0.5f * static_cast<float>(k_mn[sub])) << e;
  }
  // value 0: qs[0]=255 -> 15, qh[0]=5=0b101 bit0 set -> 31; sub 0: 0.25*1*31 - 0.5*63
  EXPECT_EQ(y[0], 7.75f - 31.5f);
  // value 96 (chunk 1, r 32): high nibble of qs[32] = 255-96=159=0x9f -> 9, bit 3 of qh[0]=0b101 -> 0
  EXPECT_EQ(y[96], 0.25f * 22 * 9 - 0.5f * 48);
}

// Q6_K, 210 bytes: ql[128], qh[64], int8 scales[16], d (fp16, last). Value e: half h = e/128,
// run k = (e%128)/32, l = e%32; low 4 bits: k=0 low nibble of ql[64h+l], k=1 low nibble of
// ql[64h+l+32], k=2 high nibble of ql[64h+l], k=3 high nibble of ql[64h+l+32]; top 2 bits: bits
// 2k..2k+1 of qh[32h+l]; y = d * scales[e/16] * (q - 32).
TEST(KnownAnswer, Q6_K) {
  std::vector<uint8_t> b(2 * 210);
  for (int blk = 0; blk < 2; ++blk) {
    uint8_t* p = b.data() + 210 * blk;
    for (int i = 0; i < 128; ++i) p[i] = static_cast<uint8_t>(i * 29 + 7 + blk);
    for (int i = 0; i < 64; ++i) p[128 + i] = static_cast<uint8_t>(i * 53 + 1);
    for (int i = 0; i < 16; ++i)
      p[192 + i] = static_cast<uint8_t>(static_cast<int8_t>((i % 2 ? -1 : 1) * (i * 8 + 1)));
    p[192 + 15] = static_cast<uint8_t>(static_cast<int8_t>(-128));
    p[208] = static_cast<uint8_t>((blk ? h_1 : h_0_5) & 0xff);
    p[209] = static_cast<uint8_t>((blk ? h_1 : h_0_5) >> 8);
  }
  const auto y = decode(ggml_type::q6_k, b, 512);
  for (int blk = 0; blk < 2; ++blk) {
    const uint8_t* p = b.data() + 210 * blk;
    const float d = blk ? 1.0f : 0.5f;
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const uint8_t lbyte = p[64 * h + l + (k % 2 ? 32 : 0)];
      const int low = k < 2 ? (lbyte & 15) : (lbyte >> 4);
      const int high = (p[128 + 32 * h + l] >> (2 * k)) & 3;
      const int sc = static_cast<int8_t>(p[192 + e / 16]);
      EXPECT_EQ(y[256 * blk + e], d * static_cast<float>(sc * ((low | (high << 4)) - 32))) << blk << " " << e;
    }
  }
  // value 0: ql[0]=7 -> 7, qh[0]=1 -> bits0-1 = 1 -> q = 7+16-32 = -9; scale[0] = 1; d = 0.5
  EXPECT_EQ(y[0], -4.5f);
  // value 255: h1 k3 l31: ql[64+31+32=127] = (127*29+7)&255 = 106 = 0x6a -> high 6; qh[32+31=63] =
  // (63*53+1)&255 = 12 = 0b00'00'11'00 -> bits 6-7 = 0; q = 6-32 = -26; scale[15] = -128
  EXPECT_EQ(y[255], 0.5f * -128 * -26);
}

// Decoders leave nothing outside the row untouched and handle several blocks; zero blocks decode
// to zeros for every type.
TEST(KnownAnswer, ZeroBlocksDecodeToZero) {
  for (ggml_type t : {ggml_type::f16, ggml_type::bf16, ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0,
                      ggml_type::q5_1, ggml_type::q8_0, ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k}) {
    const int64_t n = 512;
    std::vector<uint8_t> b(*tandem::row_bytes(t, n), 0);
    std::vector<float> y(n + 1, 7.0f);
    tandem::dequantize_row(t, b.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 0.0f) << tandem::type_name(t) << " " << i;
    EXPECT_EQ(y[n], 7.0f);
  }
}

}  // namespace
