// The ggml tensor element types that GGUF files name, with their block geometry.
// The reader uses this table to validate tensor sizes; quant/ says which types we compute with.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tandem {

enum class ggml_type : uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq4_nl = 20,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  bf16 = 30,
  mxfp4 = 39,
};

struct ggml_type_info {
  ggml_type type;
  std::string_view name;   // as llama.cpp prints it: "Q4_K", "F16"
  uint32_t block_size;     // elements per block
  uint32_t type_size;      // bytes per block
};

// nullptr for ids this build does not know (the reader rejects such tensors).
const ggml_type_info* find_type_info(uint32_t id);
const ggml_type_info& type_info(ggml_type t);
std::string_view type_name(ggml_type t);
std::optional<ggml_type> type_from_name(std::string_view name);  // case-insensitive

// Bytes of a row of n elements; nullopt when n is not a multiple of the block size
// or the product overflows.
std::optional<uint64_t> row_bytes(ggml_type t, uint64_t n);

}  // namespace tandem
