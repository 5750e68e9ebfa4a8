// Pieces the Hugging Face importer shares between its files (hf_import.cpp, hf_import_qwen35.cpp):
// the config.json field reader and the per-tensor transform. Not part of the public interface.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "convert/hf_import.h"
#include "convert/safetensors.h"

namespace tandem::hf_detail {

using json = nlohmann::json;

// Field readers: absent (or JSON null) keeps the default; present with the wrong type is an error.
class config_reader {
 public:
  config_reader(const json& j, const std::string& label) : j_(j), label_(label) {}

  const json* get(std::string_view key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  status u32(std::string_view key, uint32_t& out, bool required) const {
    const json* v = get(key);
    if (!v) return required ? status{make_error(label_, ": missing field ", key)} : status{};
    if (!v->is_number_unsigned() || v->get<uint64_t>() == 0 || v->get<uint64_t>() > 0x7fffffffull)
      return make_error(label_, ": field ", key, " must be a positive integer, got ", v->dump());
    out = static_cast<uint32_t>(v->get<uint64_t>());
    return {};
  }

  status positive_float(const json* v, std::string_view key, float& out) const {
    if (!v) return {};
    if (!v->is_number() || !(v->get<double>() > 0))
      return make_error(label_, ": field ", key, " must be a positive number, got ", v->dump());
    out = static_cast<float>(v->get<double>());
    return {};
  }

  status boolean(std::string_view key, bool& out) const {
    const json* v = get(key);
    if (!v) return {};
    if (!v->is_boolean())
      return make_error(label_, ": field ", key, " must be true or false, got ", v->dump());
    out = v->get<bool>();
    return {};
  }

  // A feature flag this importer cannot honour: present and true is an error.
  status refuse_true(std::string_view key, std::string_view why) const {
    bool v = false;
    TANDEM_TRY(boolean(key, v));
    if (v) return make_error(label_, ": ", key, " is true; ", why);
    return {};
  }

  // rope_scaling / rope_parameters: only the plain (unscaled) RoPE is supported.
  status rope_type(std::string_view key) const {
    const json* v = get(key);
    if (!v) return {};
    if (!v->is_object())
      return make_error(label_, ": field ", key, " must be an object, got ", v->dump());
    for (const char* k : {"rope_type", "type"}) {
      auto it = v->find(k);
      if (it == v->end() || it->is_null()) continue;
      if (!it->is_string()) return make_error(label_, ": field ", key, ".", k, " must be a string");
      if (it->get<std::string>() != "default")
        return make_error(label_, ": ", key, ".", k, " is \"", it->get<std::string>(),
                          "\"; only unscaled RoPE (\"default\") is supported");
    }
    return {};
  }

  const std::string& label() const { return label_; }

 private:
  const json& j_;
  const std::string& label_;
};

// rope_theta from rope_parameters (newer transformers) or the top level; checks the RoPE type.
status read_rope_theta(const config_reader& c, float& theta);
// hidden_act must be silu.
status check_silu(const config_reader& c);
// The sizes (vocab_size, hidden_size, num_hidden_layers, intermediate_size, the head counts,
// max_position_embeddings, head_dim) over hp's defaults: none is required.
status read_size_fields(const config_reader& c, hparams& hp);
// rms_norm_eps, rope_theta (read_rope_theta) and tie_word_embeddings over hp's defaults.
status read_norm_rope_tie(const config_reader& c, hparams& hp);
// num_key_value_heads divides num_attention_heads; head_dim (hidden / heads when absent) is even;
// rope_dim is set to it.
status check_heads(const config_reader& c, hparams& hp);

// How one tensor's values are rearranged and mapped on the way from safetensors to GGUF.
struct tensor_transform {
  enum class value_op { none, plus_one, neg_exp };
  std::vector<uint64_t> row_src;  // GGUF row r reads source row row_src[r]; empty: identity
  std::vector<uint64_t> col_src;  // within a row, GGUF column c reads column col_src[c]; empty: same
  value_op op = value_op::none;   // plus_one: HF's (1 + w) norms; neg_exp: ssm_a = -exp(A_log)
};

// qwen35 (Qwen3_5ForCausalLM / the text part of Qwen3_5ForConditionalGeneration), or with moe
// qwen35moe (Qwen3_5MoeForCausalLM / Qwen3_5MoeForConditionalGeneration). `root` is the whole
// config.json; a "qwen3_5" / "qwen3_5_moe" config nests the text model in text_config.
result<hf_config> parse_qwen35_config(const json& root, const std::string& label, bool moe = false);

// Where a GGUF tensor's rows come from. One source tensor; or a routed-expert tensor stacked from
// n_expert per-expert tensors (experts.E.gate_proj.weight, ...), whose rows follow each other in
// expert order; or half of a fused experts.gate_up_proj [n_expert, 2·n_ff_exp, n_embd] (gate rows
// first in each expert, as transformers' chunk(2) and llama.cpp's converter split it).
struct tensor_source {
  std::vector<const st_tensor*> parts;  // size 1, or n_expert when stacked; null: not seen yet
  bool stacked = false;
  enum class half { none, first, second } fused = half::none;
  const st_tensor* any() const;  // the first part present, for names in messages
};

// qwen3moe (Qwen3MoeForCausalLM); `root` is config.json.
result<hf_config> parse_qwen3moe_config(const json& root, const std::string& label);
// The expert fields of a MoE text config: num_experts, num_experts_per_tok, moe_intermediate_size
// (and shared_expert_intermediate_size when `shared`); the layout must be MoE in every layer.
status read_moe_fields(const config_reader& c, hparams& hp, bool shared);

// A MoE checkpoint's FFN tensor after "model.layers.N." (also under "model.language_model."):
// the GGUF name, the expert a per-expert tensor belongs to, and whether it is a fused gate_up_proj
// (then `gguf` names ffn_gate_exps and the second half goes to ffn_up_exps). nullopt otherwise.
struct moe_name {
  std::string gguf;
  int expert = -1;
  bool fused_gate_up = false;
};
std::optional<moe_name> map_moe_tensor_name(std::string_view hf_name, uint32_t n_expert);
// Tensors a qwen35 checkpoint may hold that the text model does not use (vision tower, MTP head).
bool qwen35_ignored_tensor(std::string_view hf_name);
// HF -> GGUF names for qwen35 (also under the "model.language_model." prefix); nullopt otherwise.
std::optional<std::string> map_qwen35_tensor_name(std::string_view hf_name);

// HF per-layer suffixes (after "model.layers.N.") and llama.cpp's per-layer stems.
struct layer_name {
  std::string_view hf;
  std::string_view gguf;
};
// The GGUF name of a HF tensor: the global ones (embeddings, final norm, head), or
// "model.layers.N.<suffix>" with a suffix in `layers` as "blk.N.<stem>"; nullopt otherwise.
std::optional<std::string> map_tensor_name(std::string_view hf_name, std::span<const layer_name> layers);
// The converter's value changes for a qwen35 tensor: +1 on norms (not ssm_norm), -exp(A_log),
// and the V-head reorder on the DeltaNet tensors.
tensor_transform qwen35_transform(const tensor_spec& spec, const hparams& hp);

}  // namespace tandem::hf_detail
