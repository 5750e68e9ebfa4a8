// Helpers shared by the GGUF reader and writer; not part of the public API.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gguf/gguf_value.h"

namespace tandem::gguf_detail {

constexpr uint32_t k_version = 3;
constexpr uint32_t k_default_alignment = 32;
// Larger alignments are legal powers of two but only serve to make a reader or writer pad (and
// allocate) up to gigabytes for a few bytes of file; real files use 32 (page size at most).
constexpr uint32_t k_max_alignment = 1u << 20;
constexpr uint32_t k_max_dims = 4;
constexpr uint32_t k_type_count = 13;  // wire value types 0..12
constexpr std::string_view k_alignment_key = "general.alignment";

// Smallest number of bytes one value of type t occupies on the wire (strings: the length; arrays:
// element type and count).
uint64_t min_wire_size(gguf_type t);

// True for well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s);

// s for an error message: non-printable bytes become \xNN, and long strings are cut.
std::string printable(std::string_view s);

// "u32", "string", "array of i32", "array of array".
std::string describe_type(const gguf_value& v);

}  // namespace tandem::gguf_detail
