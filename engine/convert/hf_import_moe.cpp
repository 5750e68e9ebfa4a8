// Mixture-of-experts import (qwen3moe, qwen35moe), as llama.cpp's converter does it
// (conversion/qwen.py: Qwen2MoeModel.modify_tensors, Qwen3MoeModel, Qwen3_5MoeTextModel): the
// expert config fields, the router / shared-expert names, and the routed experts stacked into 3-D
// tensors from either checkpoint layout: one tensor per expert (mlp.experts.E.gate_proj.weight, the
// Hub format of Qwen3 MoE models, which transformers 5 save_pretrained also writes for them) or the
// fused mlp.experts.gate_up_proj / down_proj of transformers 5 (the Hub format of Qwen3.5 MoE).
#include <charconv>

#include "convert/hf_import_detail.h"

namespace tandem::hf_detail {
namespace {

// Qwen3MoeConfig's defaults (transformers' configuration_qwen3_moe.py): save_pretrained may leave
// out a field that has its default value.
hparams qwen3moe_defaults() {
  hparams hp;
  hp.n_vocab = 151936;
  hp.n_embd = 2048;
  hp.n_ff = 6144;
  hp.n_layer = 24;
  hp.n_head = 32;
  hp.n_head_kv = 4;
  hp.n_ctx_train = 32768;
  hp.head_dim = 0;  // hidden_size / num_attention_heads unless given
  hp.rms_eps = 1e-6f;
  hp.rope_theta = 10000.f;
  hp.tied_output = false;
  hp.n_expert = 128;
  hp.n_expert_used = 8;
  hp.n_ff_exp = 768;
  hp.expert_weights_norm = false;  // norm_topk_prob's default; every released config sets true
  return hp;
}

// Per-layer FFN names of a MoE checkpoint (after "model.layers.N.").
constexpr layer_name k_moe_names[] = {
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.experts.down_proj", "ffn_down_exps.weight"},
    {"mlp.experts.down_proj.weight", "ffn_down_exps.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
};

constexpr layer_name k_expert_names[] = {
    {"gate_proj.weight", "ffn_gate_exps.weight"},
    {"up_proj.weight", "ffn_up_exps.weight"},
    {"down_proj.weight", "ffn_down_exps.weight"},
};

// "model.layers.N." and the rest, or nothing; "model.language_model." counts as "model.".
bool split_layer(std::string_view n, std::string_view& idx, std::string_view& rest) {
  constexpr std::string_view lm = "model.language_model.layers.", plain = "model.layers.";
  if (n.starts_with(lm)) n.remove_prefix(lm.size());
  else if (n.starts_with(plain)) n.remove_prefix(plain.size());
  else return false;
  const size_t dot = n.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 6) return false;
  idx = n.substr(0, dot);
  for (char ch : idx)
    if (ch < '0' || ch > '9') return false;
  if (idx.size() > 1 && idx[0] == '0') return false;
  rest = n.substr(dot + 1);
  return true;
}

}  // namespace

const st_tensor* tensor_source::any() const {
  for (const st_tensor* p : parts)
    if (p) return p;
  return nullptr;
}

status read_moe_fields(const config_reader& c, hparams& hp, bool shared) {
  // Released checkpoints say num_experts; transformers 5 writes qwen3_moe's as num_local_experts.
  TANDEM_TRY(c.u32(c.get("num_experts") ? "num_experts" : "num_local_experts", hp.n_expert, false));
  TANDEM_TRY(c.u32("num_experts_per_tok", hp.n_expert_used, false));
  TANDEM_TRY(c.u32("moe_intermediate_size", hp.n_ff_exp, false));
  if (shared) TANDEM_TRY(c.u32("shared_expert_intermediate_size", hp.n_ff_shexp, false));
  if (hp.n_expert_used > hp.n_expert)
    return make_error(c.label(), ": num_experts_per_tok (", hp.n_expert_used, ") exceeds num_experts (", hp.n_expert,
                      ")");
  // llama.cpp's qwen3moe / qwen35moe make every layer MoE; HF's dense-layer options must agree.
  uint32_t step = 1;
  TANDEM_TRY(c.u32("decoder_sparse_step", step, false));
  if (step != 1)
    return make_error(c.label(), ": decoder_sparse_step is ", step, "; only MoE in every layer (1) is supported");
  if (const json* m = c.get("mlp_only_layers"); m && (!m->is_array() || !m->empty()))
    return make_error(c.label(), ": mlp_only_layers is ", m->dump(), "; only MoE in every layer is supported");
  return {};
}

result<hf_config> parse_qwen3moe_config(const json& root, const std::string& label) {
  config_reader c(root, label);
  hf_config cfg;
  cfg.model_type = root.value("model_type", "");
  cfg.arch = find_arch("qwen3moe");
  if (!cfg.arch) return make_error("architecture qwen3moe is not in the architecture table");
  hparams& hp = cfg.hp;
  hp = qwen3moe_defaults();
  TANDEM_TRY(check_silu(c));
  TANDEM_TRY(c.refuse_true("use_sliding_window", "sliding-window attention is not supported"));
  TANDEM_TRY(c.refuse_true("attention_bias", "the qwen3moe architecture has no attention biases"));
  TANDEM_TRY(read_size_fields(c, hp));
  TANDEM_TRY(check_heads(c, hp));
  TANDEM_TRY(read_norm_rope_tie(c, hp));
  TANDEM_TRY(read_moe_fields(c, hp, false));
  TANDEM_TRY(c.boolean("norm_topk_prob", hp.expert_weights_norm));
  if (auto st = check_moe_hparams(*cfg.arch, hp); !st) return make_error(label, ": ", st.message());
  return cfg;
}

std::optional<moe_name> map_moe_tensor_name(std::string_view n, uint32_t n_expert) {
  std::string_view idx, rest;
  if (!split_layer(n, idx, rest)) return std::nullopt;
  const std::string blk = "blk." + std::string(idx) + ".";
  for (const auto& ln : k_moe_names)
    if (ln.hf == rest) return moe_name{blk + std::string(ln.gguf)};
  if (rest == "mlp.experts.gate_up_proj" || rest == "mlp.experts.gate_up_proj.weight")
    return moe_name{blk + "ffn_gate_exps.weight", -1, true};
  constexpr std::string_view ex = "mlp.experts.";
  if (!rest.starts_with(ex)) return std::nullopt;
  rest.remove_prefix(ex.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos) return std::nullopt;
  uint32_t e = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + dot, e);
  if (ec != std::errc() || p != rest.data() + dot || e >= n_expert || (dot > 1 && rest[0] == '0'))
    return std::nullopt;
  for (const auto& ln : k_expert_names)
    if (ln.hf == rest.substr(dot + 1)) return moe_name{blk + std::string(ln.gguf), int(e), false};
  return std::nullopt;
}

}  // namespace tandem::hf_detail
