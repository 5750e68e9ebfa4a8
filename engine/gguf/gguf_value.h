// A GGUF metadata value: one of the 13 wire types, arrays nesting. Owned (copied out of the file),
// since metadata is small next to tensor data and outlives parsing in tools and the loader.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tandem {

enum class gguf_type : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

std::string_view gguf_type_name(gguf_type t);  // "u32", "string", "array", ...

struct gguf_value;

struct gguf_array {
  gguf_type elem_type = gguf_type::u8;
  std::vector<gguf_value> items;
};

struct gguf_value {
  // Alternative index == wire type id, so type() is v.index().
  std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
               gguf_array, uint64_t, int64_t, double>
      v;

  gguf_type type() const { return static_cast<gguf_type>(v.index()); }
};

struct gguf_kv {
  std::string key;
  gguf_value value;
};

// Convenience constructors for writers and tests.
gguf_value gguf_string_array(const std::vector<std::string>& items);
gguf_value gguf_i32_array(const std::vector<int32_t>& items);
gguf_value gguf_f32_array(const std::vector<float>& items);

}  // namespace tandem
