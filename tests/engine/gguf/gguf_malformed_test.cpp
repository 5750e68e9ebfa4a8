// One hand-made malformed file per known parser attack; each must fail with an error that names
// the field and its byte offset. Offsets: the header is 24 bytes, so the first KV key (or, with no
// KVs, the first tensor name) starts at 24.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "gguf/gguf_reader.h"
#include "gguf_bytes.h"

namespace tandem {
namespace {

using test::gguf_bytes;

constexpr uint32_t k_u8 = 0, k_u32 = 4, k_i32 = 5, k_f32 = 6, k_bool = 7, k_string = 8, k_array = 9;
constexpr uint32_t k_F32 = 0, k_Q4_0 = 2, k_F64 = 28;

// Parses and expects failure with every part in the message.
void expect_error(const gguf_bytes& b, std::initializer_list<std::string> parts,
                  const gguf_limits& limits = {}) {
  auto f = gguf_file::parse(b.b, limits);
  ASSERT_FALSE(f.ok()) << "parsed a malformed file; expected: " << *parts.begin();
  const std::string& msg = f.message();
  if (std::getenv("GGUF_PRINT_ERRORS")) std::printf("%s\n", msg.c_str());
  EXPECT_EQ(msg.rfind("gguf: ", 0), 0u) << msg;
  for (const std::string& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
}

void expect_ok(const gguf_bytes& b, const gguf_limits& limits = {}) {
  auto f = gguf_file::parse(b.b, limits);
  EXPECT_TRUE(f.ok()) << f.message();
}

// ---- header ----

TEST(gguf_malformed, bad_magic) {
  gguf_bytes b;
  b.raw("GGML").u32(3).u64(0).u64(0);
  expect_error(b, {"magic at offset 0", "not a GGUF file", "older GGML-family file"});
}

// A file that is not a model is not read out in the error (the daemon loads any path it is given).
TEST(gguf_malformed, bad_magic_does_not_echo_the_file) {
  gguf_bytes b;
  b.raw("root:x:0:0:root:/root:/bin/bash\n");
  auto f = gguf_file::parse(b.b);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("not a GGUF file"), std::string::npos) << f.message();
  for (const char* leak : {"root", "72 6f", "726f", "/bin"})
    EXPECT_EQ(f.message().find(leak), std::string::npos) << f.message();
}

TEST(gguf_malformed, empty_and_tiny) {
  expect_error(gguf_bytes{}, {"magic at offset 0", "truncated"});
  gguf_bytes b;
  b.raw("GG");
  expect_error(b, {"magic at offset 0", "truncated"});
}

TEST(gguf_malformed, version_1_refused_2_and_3_accepted) {
  gguf_bytes v1;
  v1.header(0, 0, 1);
  expect_error(v1, {"version at offset 4", "v1 is not supported"});
  gguf_bytes v4;
  v4.header(0, 0, 4);
  expect_error(v4, {"version at offset 4", "unsupported version 4"});
  gguf_bytes be;
  be.header(0, 0, 0x03000000u);
  expect_error(be, {"version at offset 4", "big-endian"});
  for (uint32_t v : {2u, 3u}) {
    gguf_bytes ok;
    ok.header(0, 0, v);
    auto f = gguf_file::parse(ok.b);
    ASSERT_TRUE(f.ok()) << f.message();
    EXPECT_EQ(f->version(), v);
  }
}

TEST(gguf_malformed, truncated_header) {
  gguf_bytes b;
  b.raw("GGUF").u32(3).u32(0);
  expect_error(b, {"tensor_count at offset 8", "truncated"});
  gguf_bytes c;
  c.raw("GGUF").u32(3).u64(0).u32(0);
  expect_error(c, {"kv_count at offset 16", "truncated"});
}

TEST(gguf_malformed, huge_counts) {
  gguf_bytes t;
  t.header(uint64_t{1} << 40, 0);
  expect_error(t, {"tensor_count at offset 8", "exceeds the limit"});
  gguf_bytes t2;
  t2.header(1000, 0).zeros(64);  // under the limit, but 1000 infos cannot fit in 64 bytes
  expect_error(t2, {"tensor_count at offset 8", "remain"});
  gguf_bytes k;
  k.header(0, ~uint64_t{0});
  expect_error(k, {"kv_count at offset 16", "exceeds the limit"});
  gguf_bytes k2;
  k2.header(0, 100).kv_u32("a", 1);
  expect_error(k2, {"kv_count at offset 16", "remain"});
  gguf_limits small;
  small.max_tensors = 1;
  gguf_bytes t3;
  t3.header(2, 0).zeros(200);
  expect_error(t3, {"tensor_count at offset 8", "exceeds the limit of 1"}, small);
}

// ---- metadata ----

TEST(gguf_malformed, huge_key_length) {
  gguf_bytes b;
  b.header(0, 1).u64(uint64_t{1} << 62).u32(k_u32).u32(0);
  expect_error(b, {"kv[0] key length at offset 24", "exceeds the limit"});
}

TEST(gguf_malformed, key_past_eof) {
  gguf_bytes b;
  b.header(0, 1).u64(1000).raw("abcd").zeros(9);
  expect_error(b, {"kv[0] key at offset 32", "truncated", "length 1000"});
}

TEST(gguf_malformed, empty_key_and_bad_utf8_key) {
  gguf_bytes b;
  b.header(0, 1).kv_u32("", 1);
  expect_error(b, {"kv[0] key at offset 24", "empty key"});
  gguf_bytes c;
  c.header(0, 1).kv_u32("a\xff", 1);
  expect_error(c, {"kv[0] key at offset 24", "not valid UTF-8", "a\\xff"});
}

TEST(gguf_malformed, duplicate_key) {
  gguf_bytes b;
  b.header(0, 2).kv_u32("general.x", 1);
  const size_t second = b.size();
  b.kv_u32("general.x", 2);
  expect_error(
      b, {"kv[1] key at offset " + std::to_string(second), "duplicate key 'general.x'", "kv[0]"});
}

TEST(gguf_malformed, unknown_value_type) {
  gguf_bytes b;
  b.header(0, 1).key("a", 13).u32(0);
  expect_error(b, {"key 'a' type at offset 33", "unknown value type 13"});
}

TEST(gguf_malformed, value_truncated) {
  gguf_bytes b;
  b.header(0, 1).key("a", k_u32).u8(1).u8(2);
  expect_error(b, {"key 'a' at offset 37", "truncated"});
}

TEST(gguf_malformed, huge_string_value) {
  gguf_bytes b;
  b.header(0, 1).key("a", k_string).u64(~uint64_t{0});
  expect_error(b, {"key 'a' length at offset 37", "exceeds the limit"});
  gguf_bytes c;
  c.header(0, 1).key("a", k_string).u64(100).raw("short");
  expect_error(c, {"key 'a' at offset 45", "truncated", "length 100"});
  gguf_limits lim;
  lim.max_string_bytes = 4;
  gguf_bytes d;
  d.header(0, 1).kv_string("a", "hello");
  expect_error(d, {"key 'a' length at offset 37", "exceeds the limit of 4"}, lim);
}

TEST(gguf_malformed, bool_not_0_or_1) {
  gguf_bytes b;
  b.header(0, 1).key("flag", k_bool).u8(2);
  expect_error(b, {"key 'flag' at offset 40", "bool byte is 2, expected 0 or 1"});
  gguf_bytes c;  // inside an array, the item index is named
  c.header(0, 1).key("flags", k_array).u32(k_bool).u64(3).u8(1).u8(0).u8(255);
  expect_error(c, {"key 'flags'[2] at offset 55", "bool byte is 255"});
}

TEST(gguf_malformed, huge_array_counts) {
  gguf_bytes b;
  b.header(0, 1).key("a", k_array).u32(k_u8).u64(uint64_t{1} << 40);
  expect_error(b, {"key 'a' count at offset 41", "exceeds the limit"});
  gguf_bytes c;  // under the limit, but more than the bytes left
  c.header(0, 1).key("a", k_array).u32(k_u32).u64(1000).zeros(100);
  expect_error(c, {"key 'a' count at offset 41", "remain"});
  gguf_bytes d;  // strings: at least 8 bytes each
  d.header(0, 1).key("a", k_array).u32(k_string).u64(20).zeros(100);
  expect_error(d, {"key 'a' count at offset 41", "20 items of string"});
  gguf_bytes e;  // nested arrays: at least 12 bytes each
  e.header(0, 1).key("a", k_array).u32(k_array).u64(10).zeros(100);
  expect_error(e, {"key 'a' count at offset 41", "10 items of array"});
}

TEST(gguf_malformed, total_array_items_limit) {
  gguf_limits lim;
  lim.max_total_array_items = 3;
  gguf_bytes b;
  b.header(0, 2).key("a", k_array).u32(k_u8).u64(2).u8(1).u8(2);
  const size_t count2 = b.size() + 8 + 1 + 4 + 4;
  b.key("b", k_array).u32(k_u8).u64(2).u8(1).u8(2);
  expect_error(b, {"key 'b' count at offset " + std::to_string(count2), "in all"}, lim);
  lim.max_total_array_items = 4;
  expect_ok(b, lim);
}

TEST(gguf_malformed, unknown_array_element_type) {
  gguf_bytes b;
  b.header(0, 1).key("a", k_array).u32(99).u64(0);
  expect_error(b, {"key 'a' element type at offset 37", "unknown value type 99"});
}

// An array nested `levels` deep whose innermost array is an empty u8 array.
gguf_bytes nested(int levels) {
  gguf_bytes b;
  b.header(0, 1).key("n", k_array);
  for (int i = 1; i < levels; ++i) b.u32(k_array).u64(1);
  b.u32(k_u8).u64(0);
  return b;
}

TEST(gguf_malformed, array_nesting_limit) {
  expect_ok(nested(4));
  expect_error(nested(5), {"key 'n'[0][0][0] element type", "nesting deeper than the limit of 4"});
  gguf_limits flat;
  flat.max_array_depth = 1;
  expect_ok(nested(1), flat);
  expect_error(nested(2),
               {"key 'n' element type at offset 37", "nesting deeper than the limit of 1"}, flat);
  flat.max_array_depth = 0;
  expect_error(nested(1), {"key 'n' at offset 37", "nesting"}, flat);
}

TEST(gguf_malformed, bad_alignment_values) {
  gguf_bytes f;
  f.header(0, 1).key("general.alignment", k_f32).put(32.0f);
  expect_error(f, {"key 'general.alignment' at offset 53", "is f32, expected a u32 power of two"});
  gguf_bytes i;
  i.header(0, 1).key("general.alignment", k_i32).put(int32_t{32});
  expect_error(i, {"key 'general.alignment' at offset 53", "is i32"});
  for (uint32_t a : {0u, 48u, 3u, 0x80000001u}) {
    gguf_bytes b;
    b.header(0, 1).kv_u32("general.alignment", a);
    expect_error(b, {"key 'general.alignment' at offset 53", "not a nonzero power of two"});
  }
  // A legal power of two, but padding to it would cost a gigabyte (found by the fuzzer).
  gguf_bytes huge;
  huge.header(0, 1).kv_u32("general.alignment", 1u << 30);
  expect_error(huge, {"key 'general.alignment' at offset 53", "larger than the limit"});
  gguf_bytes ok;
  ok.header(0, 1).kv_u32("general.alignment", 1);
  auto r = gguf_file::parse(ok.b);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->alignment(), 1u);
}

// ---- tensor infos ----

TEST(gguf_malformed, tensor_name) {
  gguf_bytes b;
  b.header(1, 0).u64(uint64_t{1} << 60).zeros(64);
  expect_error(b, {"tensor[0] name length at offset 24", "exceeds the limit"});
  gguf_bytes e;
  e.header(1, 0).tensor_info("", {4}, k_F32, 0).pad_to(32).zeros(16);
  expect_error(e, {"tensor[0] name at offset 24", "empty tensor name"});
  gguf_bytes u;
  u.header(1, 0).tensor_info("\xc0\x80", {4}, k_F32, 0).pad_to(32).zeros(16);  // overlong NUL
  expect_error(u, {"tensor[0] name at offset 24", "not valid UTF-8"});
}

TEST(gguf_malformed, duplicate_tensor_name) {
  gguf_bytes b;
  b.header(2, 0).tensor_info("w", {8}, k_F32, 0);
  const size_t second = b.size();
  b.tensor_info("w", {8}, k_F32, 32).pad_to(32).zeros(64);
  expect_error(b, {"tensor[1] name at offset " + std::to_string(second),
                   "duplicate tensor name 'w'", "tensor[0]"});
}

TEST(gguf_malformed, n_dims_out_of_range) {
  for (uint32_t n : {0u, 5u, 0xffffffffu}) {
    gguf_bytes b;
    b.header(1, 0)
        .str("w")
        .u32(n)
        .u64(1)
        .u64(1)
        .u64(1)
        .u64(1)
        .u64(1)
        .u32(k_F32)
        .u64(0)
        .pad_to(32)
        .zeros(32);
    expect_error(b, {"tensor 'w' n_dims at offset 33", "out of range (1 to 4)"});
  }
}

TEST(gguf_malformed, zero_dim) {
  gguf_bytes b;
  b.header(1, 0).tensor_info("blk.0.attn_q.weight", {4, 0}, k_F32, 0).pad_to(32);
  // name at 24 (8 + 19 bytes), n_dims at 51, dims[0] at 55, dims[1] at 63
  expect_error(b, {"tensor 'blk.0.attn_q.weight' dims[1] at offset 63", "dimension is 0"});
}

TEST(gguf_malformed, dims_overflow) {
  gguf_bytes b;
  b.header(1, 0).tensor_info("w", {uint64_t{1} << 32, uint64_t{1} << 32}, k_F32, 0).pad_to(32);
  expect_error(b, {"tensor 'w' dims[1] at offset 45", "overflow"});
  gguf_bytes c;
  c.header(1, 0).tensor_info("w", {~uint64_t{0}}, k_F32, 0).pad_to(32);
  expect_error(c, {"tensor 'w' dims[0] at offset 37", "overflow"});
  gguf_bytes d;  // the element count fits in 63 bits but the byte size does not
  d.header(1, 0).tensor_info("w", {uint64_t{1} << 62}, k_F64, 0).pad_to(32);
  expect_error(d, {"tensor 'w' dims[0] at offset 37", "overflows"});
}

TEST(gguf_malformed, unknown_tensor_type) {
  for (uint32_t t : {4u, 5u, 100u, 0xffffffffu}) {
    gguf_bytes b;
    b.header(1, 0).tensor_info("w", {32}, t, 0).pad_to(32).zeros(128);
    expect_error(b, {"tensor 'w' type at offset 45", "unknown ggml type id " + std::to_string(t)});
  }
}

TEST(gguf_malformed, row_not_multiple_of_block) {
  gguf_bytes b;
  b.header(1, 0).tensor_info("w", {33, 2}, k_Q4_0, 0).pad_to(32).zeros(128);
  expect_error(b, {"tensor 'w' dims[0] at offset 37",
                   "row length 33 is not a multiple of the Q4_0 block size 32"});
}

TEST(gguf_malformed, misaligned_offset) {
  gguf_bytes b;
  b.header(2, 0).tensor_info("a", {4}, k_F32, 0);
  const size_t off_field = b.size() + 8 + 1 + 4 + 8 + 4;
  b.tensor_info("b", {4}, k_F32, 16).pad_to(32).zeros(64);
  expect_error(b, {"tensor 'b' offset at offset " + std::to_string(off_field),
                   "16 is not a multiple of the alignment 32"});
  // With general.alignment = 16 the same layout is valid.
  gguf_bytes c;
  c.header(2, 1)
      .kv_u32("general.alignment", 16)
      .tensor_info("a", {4}, k_F32, 0)
      .tensor_info("b", {4}, k_F32, 16);
  c.pad_to(16).zeros(32);
  expect_ok(c);
}

TEST(gguf_malformed, overlapping_offsets) {
  gguf_bytes b;
  b.header(2, 0).tensor_info("a", {16}, k_F32, 0);  // 64 bytes
  const size_t off_field = b.size() + 8 + 1 + 4 + 8 + 4;
  b.tensor_info("b", {16}, k_F32, 32).pad_to(32).zeros(128);
  expect_error(b, {"tensor 'b' offset at offset " + std::to_string(off_field),
                   "32 overlaps tensor 'a' [0, 64)"});
  gguf_bytes same;  // two tensors at the same offset
  same.header(2, 0)
      .tensor_info("a", {8}, k_F32, 0)
      .tensor_info("b", {8}, k_F32, 0)
      .pad_to(32)
      .zeros(64);
  expect_error(same, {"tensor 'b' offset", "overlaps tensor 'a'"});
}

TEST(gguf_malformed, gaps_between_tensors) {
  gguf_bytes b;
  b.header(2, 0)
      .tensor_info("a", {16}, k_F32, 0)
      .tensor_info("b", {16}, k_F32, 128)
      .pad_to(32)
      .zeros(256);
  expect_error(b,
               {"tensor 'b' offset at offset", "128 leaves a gap after tensor 'a' (expected 64)"});
  gguf_bytes start;
  start.header(1, 0).tensor_info("a", {8}, k_F32, 32).pad_to(32).zeros(64);
  expect_error(start, {"tensor 'a' offset", "gap at the start of the data section"});
  // Offsets need not follow the info order, only be packed once sorted.
  gguf_bytes swapped;
  swapped.header(2, 0)
      .tensor_info("a", {16}, k_F32, 64)
      .tensor_info("b", {16}, k_F32, 0)
      .pad_to(32)
      .zeros(128);
  expect_ok(swapped);
}

TEST(gguf_malformed, tensor_data_past_eof) {
  gguf_bytes b;
  b.header(1, 0).tensor_info("w", {16}, k_F32, 0).pad_to(32).zeros(63);
  expect_error(b, {"tensor 'w' offset at offset 49", "runs past the end of the file", "truncated"});
  gguf_bytes c;  // the file ends inside the padding before the data section
  c.header(1, 0).tensor_info("w", {16}, k_F32, 0);
  expect_error(c, {"data section at offset 64", "past the end of the file"});
  gguf_bytes d;  // truncated in the middle of the tensor infos
  d.header(1, 0).str("a_rather_long_tensor_name").u32(2).u64(16).u32(0);  // 32+ bytes after the
                                                                          // header
  expect_error(d, {"tensor 'a_rather_long_tensor_name' dims[1] at offset 69", "truncated"});
}

TEST(gguf_malformed, layout_tolerances) {
  // The last tensor need not be followed by its alignment padding, and trailing bytes are ignored.
  gguf_bytes nopad;
  nopad.header(1, 0).tensor_info("w", {3}, k_F32, 0).pad_to(32).zeros(12);
  expect_ok(nopad);
  gguf_bytes trailing;
  trailing.header(1, 0).tensor_info("w", {3}, k_F32, 0).pad_to(32).zeros(12).fill(100, 0xab);
  expect_ok(trailing);
}

}  // namespace
}  // namespace tandem
