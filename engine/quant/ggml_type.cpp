// Block geometry of ggml types, from ggml-common.h.
#include "quant/ggml_type.h"

#include <array>
#include <cctype>
#include <limits>

namespace tandem {
namespace {

constexpr std::array<ggml_type_info, 23> k_types{{
    {ggml_type::f32, "F32", 1, 4},
    {ggml_type::f16, "F16", 1, 2},
    {ggml_type::q4_0, "Q4_0", 32, 18},
    {ggml_type::q4_1, "Q4_1", 32, 20},
    {ggml_type::q5_0, "Q5_0", 32, 22},
    {ggml_type::q5_1, "Q5_1", 32, 24},
    {ggml_type::q8_0, "Q8_0", 32, 34},
    {ggml_type::q8_1, "Q8_1", 32, 36},
    {ggml_type::q2_k, "Q2_K", 256, 84},
    {ggml_type::q3_k, "Q3_K", 256, 110},
    {ggml_type::q4_k, "Q4_K", 256, 144},
    {ggml_type::q5_k, "Q5_K", 256, 176},
    {ggml_type::q6_k, "Q6_K", 256, 210},
    {ggml_type::q8_k, "Q8_K", 256, 292},
    {ggml_type::iq4_nl, "IQ4_NL", 32, 18},
    {ggml_type::iq4_xs, "IQ4_XS", 256, 136},
    {ggml_type::i8, "I8", 1, 1},
    {ggml_type::i16, "I16", 1, 2},
    {ggml_type::i32, "I32", 1, 4},
    {ggml_type::i64, "I64", 1, 8},
    {ggml_type::f64, "F64", 1, 8},
    {ggml_type::bf16, "BF16", 1, 2},
    {ggml_type::mxfp4, "MXFP4", 32, 17},
}};

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

const ggml_type_info* find_type_info(uint32_t id) {
  for (const auto& t : k_types) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

const ggml_type_info& type_info(ggml_type t) { return *find_type_info(static_cast<uint32_t>(t)); }

std::string_view type_name(ggml_type t) {
  const ggml_type_info* info = find_type_info(static_cast<uint32_t>(t));
  return info ? info->name : std::string_view("unknown");
}

std::optional<ggml_type> type_from_name(std::string_view name) {
  for (const auto& t : k_types) {
    if (iequal(t.name, name)) return t.type;
  }
  return std::nullopt;
}

std::optional<uint64_t> row_bytes(ggml_type t, uint64_t n) {
  const ggml_type_info* info = find_type_info(static_cast<uint32_t>(t));
  if (!info || n % info->block_size != 0) return std::nullopt;
  uint64_t blocks = n / info->block_size;
  if (blocks > std::numeric_limits<uint64_t>::max() / info->type_size) return std::nullopt;
  return blocks * info->type_size;
}

}  // namespace tandem
