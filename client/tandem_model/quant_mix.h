// llama.cpp's file types (general.file_type) and the per-tensor type rule each one implies.
// `make` and `quantize` share this rule, so a made Q4_K_M file has the same mixture as a quantized one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "quant/ggml_type.h"

namespace tandem {

// Values of llama.cpp's enum llama_ftype (include/llama.h); stored as general.file_type.
enum class file_type : uint32_t {
  all_f32 = 0,
  mostly_f16 = 1,
  mostly_q4_0 = 2,
  mostly_q4_1 = 3,
  mostly_q8_0 = 7,
  mostly_q5_0 = 8,
  mostly_q5_1 = 9,
  mostly_q2_k = 10,
  mostly_q3_k_s = 11,
  mostly_q3_k_m = 12,
  mostly_q3_k_l = 13,
  mostly_q4_k_s = 14,
  mostly_q4_k_m = 15,
  mostly_q5_k_s = 16,
  mostly_q5_k_m = 17,
  mostly_q6_k = 18,
  mostly_bf16 = 32,
};

// "MOSTLY_Q4_K_M", "ALL_F32"; ids we have no name for read "UNKNOWN_<id>".
std::string file_type_name(uint32_t id);

// A target file type that this tool can produce ("Q4_K_M", "F16", ... case-insensitive;
// "Q4_K" and "Q5_K" mean the _M variants, as in llama-quantize).
struct quant_target {
  file_type ftype;
  std::string_view name;  // "Q4_K_M"
  ggml_type base;         // the type most 2-D weights get
};
std::optional<quant_target> find_target(std::string_view name);
std::vector<std::string_view> target_names();

// What the rule needs to know about the model as a whole.
struct mix_context {
  uint32_t n_layer = 0;            // block count (ffn_down layers)
  uint32_t n_expert = 0;           // <arch>.expert_count, 0 when dense
  bool has_output = false;         // an output.weight exists (else token_embd is the output head)
  std::vector<int> attn_v_layers;  // sorted layers with attn_v / attn_qkv / attn_kv_b weights
};
mix_context make_mix_context(const std::vector<std::string>& tensor_names, uint32_t n_layer,
                             uint32_t n_expert);

// llama-quantize's test for tensors it converts: 2-D or larger weights, except norms,
// the MoE router and ssm_conv1d. Everything else keeps its type (`make` writes it as F32).
bool is_quantizable(std::string_view name, uint32_t n_dims);

struct type_choice {
  ggml_type type;
  bool fallback = false;  // the rule's type did not fit the row length
};

// The type a quantizable tensor gets under `target`; `row` is its dims[0]. pure: every tensor
// gets the base type (llama-quantize --pure), still subject to the row-length fallback.
type_choice choose_type(const quant_target& target, std::string_view name, uint64_t row,
                        const mix_context& ctx, bool pure = false);

}  // namespace tandem
