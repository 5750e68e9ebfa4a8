// Qwen3.5 (qwen35, and qwen35moe's shared part) import, as llama.cpp's converter does it (conversion/qwen.py: Qwen3NextModel,
// _LinearAttentionVReorderBase, _Qwen35MRopeMixin, Qwen3_5TextModel): config fields, tensor names,
// +1 folded into the (1 + w) norms, ssm_a = -exp(A_log), and the V heads reordered from HF's
// grouped order to ggml's tiled one.
#include <algorithm>

#include "convert/hf_import_detail.h"

namespace tandem::hf_detail {
namespace {

// HF per-layer suffixes (after "model.layers.N.") and llama.cpp's names for qwen35.
constexpr layer_name k_qwen35_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},  // [q, gate] per head: kept as it is
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
    {"linear_attn.A_log", "ssm_a"},
    {"linear_attn.dt_bias", "ssm_dt.bias"},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
    {"linear_attn.norm.weight", "ssm_norm.weight"},
    {"linear_attn.out_proj.weight", "ssm_out.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// Qwen3_5TextConfig's defaults (transformers' configuration_qwen3_5.py): save_pretrained may leave
// out a field that has its default value, so an absent field means this value.
hparams qwen35_defaults() {
  hparams hp;
  hp.n_vocab = 248320;
  hp.n_embd = 4096;
  hp.n_ff = 12288;
  hp.n_layer = 32;
  hp.n_head = 16;
  hp.n_head_kv = 4;
  hp.n_ctx_train = 32768;
  hp.head_dim = 256;
  hp.rms_eps = 1e-6f;
  hp.rope_theta = 10000.f;
  hp.tied_output = false;
  hp.ssm_conv_kernel = 4;
  hp.ssm_state = 128;
  hp.ssm_groups = 16;
  hp.ssm_dt_rank = 32;
  hp.ssm_inner = 128;  // linear_value_head_dim; multiplied by the value heads below
  hp.full_attn_interval = 4;
  return hp;
}

// Qwen3_5MoeTextConfig's defaults (configuration_qwen3_5_moe.py): no dense FFN width, 256 experts.
hparams qwen35moe_defaults() {
  hparams hp = qwen35_defaults();
  hp.n_embd = 2048;
  hp.n_ff = 0;
  hp.n_layer = 40;
  hp.n_head = 16;
  hp.n_head_kv = 2;
  hp.n_expert = 256;
  hp.n_expert_used = 8;
  hp.n_ff_exp = 512;
  hp.n_ff_shexp = 512;
  hp.expert_weights_norm = true;  // its router renormalises the top-k always (no norm_topk_prob)
  return hp;
}

// The text config: text_config's fields over the top-level ones (llama.cpp merges them the same
// way), or the whole file for a qwen3_5_text config.
result<json> text_fields(const json& root, const std::string& label) {
  auto it = root.find("text_config");
  if (it == root.end() || it->is_null()) {
    const std::string mt = root.value("model_type", "");
    if (mt == "qwen3_5" || mt == "qwen3_5_moe")
      return make_error(label, ": model_type \"", mt, "\" needs a text_config object");
    return root;
  }
  if (!it->is_object()) return make_error(label, ": field text_config must be an object");
  json merged = root;
  merged.erase("text_config");
  merged.erase("vision_config");
  for (const auto& [k, v] : it->items()) merged[k] = v;
  return merged;
}

// The RoPE object of the config (rope_parameters, or the older rope_scaling), if any.
const json* rope_object(const config_reader& c) {
  for (const char* k : {"rope_parameters", "rope_scaling"})
    if (const json* v = c.get(k); v && v->is_object()) return v;
  return nullptr;
}

// rope.dimension_count = head_dim * partial_rotary_factor (default 0.25, as transformers sets it);
// rope.dimension_sections = mrope_section padded to 4 (default [11, 11, 10, 0]).
status read_rope_shape(const config_reader& c, hparams& hp) {
  const json* rp = rope_object(c);
  const json* factor = rp && rp->contains("partial_rotary_factor") ? &(*rp)["partial_rotary_factor"]
                                                                   : c.get("partial_rotary_factor");
  float f = 0.25f;
  if (factor && !factor->is_null()) TANDEM_TRY(c.positive_float(factor, "partial_rotary_factor", f));
  if (f > 1.f) return make_error(c.label(), ": partial_rotary_factor ", f, " is above 1");
  hp.rope_dim = static_cast<uint32_t>(static_cast<double>(hp.head_dim) * f);  // int() in Python
  if (hp.rope_dim == 0 || hp.rope_dim % 2 != 0)
    return make_error(c.label(), ": head_dim ", hp.head_dim, " x partial_rotary_factor ", f, " gives ",
                      hp.rope_dim, " rotary dims; it must be even and positive");
  hp.rope_sections = {11, 11, 10, 0};
  if (rp && rp->contains("mrope_section") && !(*rp)["mrope_section"].is_null()) {
    const json& s = (*rp)["mrope_section"];
    if (!s.is_array() || s.size() > 4)
      return make_error(c.label(), ": mrope_section must be a list of at most 4 integers, got ", s.dump());
    hp.rope_sections = {};
    for (size_t i = 0; i < s.size(); ++i) {
      if (!s[i].is_number_unsigned() || s[i].get<uint64_t>() > 0xffff)
        return make_error(c.label(), ": mrope_section[", i, "] is ", s[i].dump());
      hp.rope_sections[i] = static_cast<uint32_t>(s[i].get<uint64_t>());
    }
  }
  uint64_t pairs = 0;
  for (uint32_t s : hp.rope_sections) pairs += s;
  if (pairs * 2 > hp.rope_dim)
    return make_error(c.label(), ": mrope_section covers ", pairs * 2, " dims, more than the ", hp.rope_dim,
                      " rotary dims (head_dim x partial_rotary_factor)");
  return {};
}

// Which layers attend: layer_types when given, else full_attention_interval. The GGUF can only say
// "every Nth layer", so layer_types must follow such a pattern.
status read_layer_kinds(const config_reader& c, hparams& hp) {
  hp.full_attn_interval = 4;
  TANDEM_TRY(c.u32("full_attention_interval", hp.full_attn_interval, false));
  const json* lt = c.get("layer_types");
  if (!lt) return {};
  if (!lt->is_array() || lt->size() != hp.n_layer)
    return make_error(c.label(), ": layer_types must list ", hp.n_layer, " layers");
  uint32_t first_full = 0;
  while (first_full < hp.n_layer && (*lt)[first_full] != "full_attention") ++first_full;
  if (first_full == hp.n_layer)
    return make_error(c.label(), ": layer_types has no full_attention layer");
  if (c.get("full_attention_interval") && hp.full_attn_interval != first_full + 1)
    return make_error(c.label(), ": layer_types disagrees with full_attention_interval ", hp.full_attn_interval);
  hp.full_attn_interval = first_full + 1;
  for (uint32_t i = 0; i < hp.n_layer; ++i) {
    const bool full = hp.kind(i) == layer_kind::attention;
    const json& t = (*lt)[i];
    if (t != "full_attention" && t != "linear_attention")
      return make_error(c.label(), ": layer_types[", i, "] is ", t.dump(),
                        "; only \"linear_attention\" and \"full_attention\" are supported");
    if ((t == "full_attention") != full)
      return make_error(c.label(), ": layer_types[", i, "] is ", t.dump(),
                        " but the layers must attend every ", hp.full_attn_interval, "th layer exactly");
  }
  return {};
}

status read_fields(const config_reader& c, hparams& hp) {
  TANDEM_TRY(check_silu(c));
  TANDEM_TRY(c.refuse_true("attention_bias", "the qwen35 architecture has no attention biases"));
  if (const json* g = c.get("attn_output_gate"); g && *g == false)
    return make_error(c.label(), ": attn_output_gate is false; qwen35 attention always has the output gate");
  TANDEM_TRY(read_size_fields(c, hp));
  if (hp.n_head % hp.n_head_kv != 0)
    return make_error(c.label(), ": num_attention_heads (", hp.n_head, ") is not a multiple of num_key_value_heads (",
                      hp.n_head_kv, ")");
  TANDEM_TRY(read_norm_rope_tie(c, hp));
  TANDEM_TRY(c.u32("linear_conv_kernel_dim", hp.ssm_conv_kernel, false));
  TANDEM_TRY(c.u32("linear_key_head_dim", hp.ssm_state, false));
  TANDEM_TRY(c.u32("linear_num_key_heads", hp.ssm_groups, false));
  TANDEM_TRY(c.u32("linear_num_value_heads", hp.ssm_dt_rank, false));
  uint32_t v_dim = hp.ssm_inner;
  TANDEM_TRY(c.u32("linear_value_head_dim", v_dim, false));
  hp.ssm_inner = v_dim * hp.ssm_dt_rank;
  TANDEM_TRY(read_rope_shape(c, hp));
  return read_layer_kinds(c, hp);
}

// The index a GGUF entry of a V-head-ordered span reads, for spans of `head` entries per head.
std::vector<uint64_t> v_span_map(uint64_t offset, const hparams& hp, uint64_t head) {
  const uint64_t n = uint64_t(hp.ssm_dt_rank) * head;
  std::vector<uint64_t> m(offset + n);
  for (uint64_t i = 0; i < offset; ++i) m[i] = i;
  for (uint64_t i = 0; i < n; ++i) m[offset + i] = offset + qwen35_v_source_index(i, hp.ssm_groups, hp.ssm_dt_rank, head);
  return m;
}

}  // namespace

result<hf_config> parse_qwen35_config(const json& root, const std::string& label, bool moe) {
  auto text = text_fields(root, label);
  if (!text) return text.err();
  config_reader c(*text, label);
  hf_config cfg;
  cfg.model_type = root.value("model_type", "");
  const char* arch = moe ? "qwen35moe" : "qwen35";
  cfg.arch = find_arch(arch);
  if (!cfg.arch) return make_error("architecture ", arch, " is not in the architecture table");
  cfg.hp = moe ? qwen35moe_defaults() : qwen35_defaults();
  TANDEM_TRY(read_fields(c, cfg.hp));
  if (moe) TANDEM_TRY(read_moe_fields(c, cfg.hp, true));
  auto st = check_hybrid_hparams(*cfg.arch, cfg.hp);
  if (st) st = check_moe_hparams(*cfg.arch, cfg.hp);
  if (!st) return make_error(label, ": ", st.message());
  return cfg;
}

bool qwen35_ignored_tensor(std::string_view n) {
  for (std::string_view p : {"mtp.", "model.mtp.", "model.visual.", "visual.", "model.language_model.visual."})
    if (n.starts_with(p)) return true;
  return false;
}

std::optional<std::string> map_qwen35_tensor_name(std::string_view n) {
  constexpr std::string_view lm = "model.language_model.";
  std::string plain;
  if (n.starts_with(lm)) {
    plain = "model." + std::string(n.substr(lm.size()));
    n = plain;
  }
  return map_tensor_name(n, k_qwen35_names);
}

tensor_transform qwen35_transform(const tensor_spec& spec, const hparams& hp) {
  tensor_transform t;
  const std::string_view n = spec.name;
  // HF's RMSNorms compute x * (1 + w); the gated ssm_norm computes x * w and is kept.
  if (spec.role == tensor_role::norm && !n.ends_with(".ssm_norm.weight")) t.op = tensor_transform::value_op::plus_one;
  if (spec.role == tensor_role::decay) t.op = tensor_transform::value_op::neg_exp;
  const delta_net_shape dn = delta_net_of(hp);
  const uint64_t qk = 2 * uint64_t(dn.key_dim());
  if (n.ends_with(".attn_qkv.weight") || n.ends_with(".ssm_conv1d.weight")) {
    t.row_src = v_span_map(qk, hp, dn.v_dim);  // channels: q and k as they are, then the v heads
  } else if (n.ends_with(".attn_gate.weight")) {
    t.row_src = v_span_map(0, hp, dn.v_dim);
  } else if (n.ends_with(".ssm_beta.weight") || n.ends_with(".ssm_alpha.weight")) {
    t.row_src = v_span_map(0, hp, 1);
  } else if (n.ends_with(".ssm_a") || n.ends_with(".ssm_dt.bias")) {
    t.col_src = v_span_map(0, hp, 1);  // 1-D: one row of Hv entries
  } else if (n.ends_with(".ssm_out.weight")) {
    t.col_src = v_span_map(0, hp, dn.v_dim);  // the input columns
  }
  return t;
}

}  // namespace tandem::hf_detail

namespace tandem {

uint64_t qwen35_v_source_index(uint64_t index, uint32_t n_k_heads, uint32_t n_v_heads, uint64_t head_size) {
  // Tiled head n = j * Hk + g (j-th value head of k-group g) comes from grouped head g * (Hv/Hk) + j.
  const uint64_t head = index / head_size, within = index % head_size;
  const uint64_t per_group = n_v_heads / n_k_heads;
  const uint64_t j = head / n_k_heads, g = head % n_k_heads;
  return (g * per_group + j) * head_size + within;
}

}  // namespace tandem
