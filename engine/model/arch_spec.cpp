// Architecture tables (llama, qwen2, qwen3, qwen35, qwen3moe, qwen35moe): llama.cpp's metadata keys and tensor names, with the
// shapes each tensor must have for given hyperparameters.
#include "model/arch_spec.h"

#include <array>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

namespace tandem {
namespace {

// Rope style facts (llama.cpp): LLM_ARCH_LLAMA uses LLAMA_ROPE_TYPE_NORM (adjacent pairs); its
// converter permutes the rows of q and k so that this matches Hugging Face's rotate_half. Qwen2
// and Qwen3 are converted without that permutation and use LLAMA_ROPE_TYPE_NEOX (halves). Qwen3.5's
// interleaved multi-section RoPE gives every section the same (text) position, which makes it NEOX
// over the first rope.dimension_count dims. The MoE variants keep their dense sibling's attention
// and rope (llama.cpp: LLM_ARCH_QWEN3MOE and LLM_ARCH_QWEN35MOE are NEOX like QWEN3 and QWEN35).
constexpr std::array<arch_spec, 6> k_archs = {{
    {"llama", arch_flags{.qk_norm = false, .qkv_bias = false, .rope = rope_style::normal, .hybrid = false}},
    {"qwen2", arch_flags{.qk_norm = false, .qkv_bias = true, .rope = rope_style::neox, .hybrid = false}},
    {"qwen3", arch_flags{.qk_norm = true, .qkv_bias = false, .rope = rope_style::neox, .hybrid = false}},
    {"qwen35", arch_flags{.qk_norm = true, .qkv_bias = false, .rope = rope_style::neox, .hybrid = true}},
    {"qwen3moe",
     arch_flags{.qk_norm = true, .qkv_bias = false, .rope = rope_style::neox, .hybrid = false, .moe = true}},
    {"qwen35moe", arch_flags{.qk_norm = true, .qkv_bias = false, .rope = rope_style::neox, .hybrid = true,
                             .moe = true, .shared_expert = true}},
}};

// Which dimension a layer tensor's shape is built from.
enum class dim {
  embd, q_rows, q_out, kv_out, ff, head, dn_conv, dn_value, dn_vheads, dn_kernel, dn_vdim, ff_exp, ff_shexp, expert
};

// The layer kinds a tensor belongs to.
enum class kinds { all, attention, delta_net };

struct layer_tensor {
  std::string_view stem;    // "attn_q"; the name is blk.N.<stem><suffix>
  std::string_view suffix;  // ".weight", ".bias" or "" (ssm_a)
  tensor_role role;
  std::array<dim, 3> shape;
  int rank;
  // dense / moe: the FFN of a dense or an MoE architecture; shexp: its shared expert.
  enum class when { always, qkv_bias, qk_norm, plain, hybrid, dense, moe, shexp } cond;
  kinds in;
  const gguf_tensor* layer_weights::*slot;
};

// Per-layer tensors: the one list every loader, writer and backend reads.
using lt = layer_tensor;
constexpr lt k_layer_tensors[] = {
    {"attn_norm", ".weight", tensor_role::norm, {dim::embd, dim::embd}, 1, lt::when::always, kinds::all, &layer_weights::attn_norm},
    {"attn_q", ".weight", tensor_role::matrix, {dim::embd, dim::q_rows}, 2, lt::when::always, kinds::attention, &layer_weights::wq},
    {"attn_q", ".bias", tensor_role::bias, {dim::q_out, dim::q_out}, 1, lt::when::qkv_bias, kinds::attention, &layer_weights::bq},
    {"attn_k", ".weight", tensor_role::matrix, {dim::embd, dim::kv_out}, 2, lt::when::always, kinds::attention, &layer_weights::wk},
    {"attn_k", ".bias", tensor_role::bias, {dim::kv_out, dim::kv_out}, 1, lt::when::qkv_bias, kinds::attention, &layer_weights::bk},
    {"attn_v", ".weight", tensor_role::matrix, {dim::embd, dim::kv_out}, 2, lt::when::always, kinds::attention, &layer_weights::wv},
    {"attn_v", ".bias", tensor_role::bias, {dim::kv_out, dim::kv_out}, 1, lt::when::qkv_bias, kinds::attention, &layer_weights::bv},
    {"attn_q_norm", ".weight", tensor_role::norm, {dim::head, dim::head}, 1, lt::when::qk_norm, kinds::attention, &layer_weights::q_norm},
    {"attn_k_norm", ".weight", tensor_role::norm, {dim::head, dim::head}, 1, lt::when::qk_norm, kinds::attention, &layer_weights::k_norm},
    {"attn_output", ".weight", tensor_role::matrix, {dim::q_out, dim::embd}, 2, lt::when::always, kinds::attention, &layer_weights::wo},
    {"attn_qkv", ".weight", tensor_role::matrix, {dim::embd, dim::dn_conv}, 2, lt::when::hybrid, kinds::delta_net, &layer_weights::dn_qkv},
    {"attn_gate", ".weight", tensor_role::matrix, {dim::embd, dim::dn_value}, 2, lt::when::hybrid, kinds::delta_net, &layer_weights::dn_gate},
    {"ssm_conv1d", ".weight", tensor_role::conv, {dim::dn_kernel, dim::dn_conv}, 2, lt::when::hybrid, kinds::delta_net, &layer_weights::dn_conv},
    {"ssm_dt", ".bias", tensor_role::bias, {dim::dn_vheads, dim::dn_vheads}, 1, lt::when::hybrid, kinds::delta_net, &layer_weights::dn_dt_bias},
    {"ssm_a", "", tensor_role::decay, {dim::dn_vheads, dim::dn_vheads}, 1, lt::when::hybrid, kinds::delta_net, &layer_weights::dn_a},
    {"ssm_beta", ".weight", tensor_role::matrix, {dim::embd, dim::dn_vheads}, 2, lt::when::hybrid, kinds::delta_net, &layer_weights::dn_beta},
    {"ssm_alpha", ".weight", tensor_role::matrix, {dim::embd, dim::dn_vheads}, 2, lt::when::hybrid, kinds::delta_net, &layer_weights::dn_alpha},
    {"ssm_norm", ".weight", tensor_role::norm, {dim::dn_vdim, dim::dn_vdim}, 1, lt::when::hybrid, kinds::delta_net, &layer_weights::dn_norm},
    {"ssm_out", ".weight", tensor_role::matrix, {dim::dn_value, dim::embd}, 2, lt::when::hybrid, kinds::delta_net, &layer_weights::dn_out},
    {"ffn_norm", ".weight", tensor_role::norm, {dim::embd, dim::embd}, 1, lt::when::plain, kinds::all, &layer_weights::ffn_norm},
    {"post_attention_norm", ".weight", tensor_role::norm, {dim::embd, dim::embd}, 1, lt::when::hybrid, kinds::all, &layer_weights::ffn_norm},
    {"ffn_gate", ".weight", tensor_role::matrix, {dim::embd, dim::ff}, 2, lt::when::dense, kinds::all, &layer_weights::ffn_gate},
    {"ffn_up", ".weight", tensor_role::matrix, {dim::embd, dim::ff}, 2, lt::when::dense, kinds::all, &layer_weights::ffn_up},
    {"ffn_down", ".weight", tensor_role::matrix, {dim::ff, dim::embd}, 2, lt::when::dense, kinds::all, &layer_weights::ffn_down},
    // llama.cpp's converter order for MoE layers: router, the routed experts, then the shared one.
    {"ffn_gate_inp", ".weight", tensor_role::router, {dim::embd, dim::expert}, 2, lt::when::moe, kinds::all, &layer_weights::ffn_gate_inp},
    {"ffn_gate_exps", ".weight", tensor_role::matrix, {dim::embd, dim::ff_exp, dim::expert}, 3, lt::when::moe, kinds::all, &layer_weights::ffn_gate_exps},
    {"ffn_up_exps", ".weight", tensor_role::matrix, {dim::embd, dim::ff_exp, dim::expert}, 3, lt::when::moe, kinds::all, &layer_weights::ffn_up_exps},
    {"ffn_down_exps", ".weight", tensor_role::matrix, {dim::ff_exp, dim::embd, dim::expert}, 3, lt::when::moe, kinds::all, &layer_weights::ffn_down_exps},
    {"ffn_gate_inp_shexp", ".weight", tensor_role::router, {dim::embd}, 1, lt::when::shexp, kinds::all, &layer_weights::ffn_gate_inp_shexp},
    {"ffn_gate_shexp", ".weight", tensor_role::matrix, {dim::embd, dim::ff_shexp}, 2, lt::when::shexp, kinds::all, &layer_weights::ffn_gate_shexp},
    {"ffn_up_shexp", ".weight", tensor_role::matrix, {dim::embd, dim::ff_shexp}, 2, lt::when::shexp, kinds::all, &layer_weights::ffn_up_shexp},
    {"ffn_down_shexp", ".weight", tensor_role::matrix, {dim::ff_shexp, dim::embd}, 2, lt::when::shexp, kinds::all, &layer_weights::ffn_down_shexp},
};

uint64_t dim_value(dim d, const hparams& hp, bool hybrid) {
  const delta_net_shape dn = delta_net_of(hp);
  switch (d) {
    case dim::embd: return hp.n_embd;
    case dim::q_rows: return uint64_t{hp.n_head} * hp.head_dim * (hybrid ? 2 : 1);
    case dim::q_out: return uint64_t{hp.n_head} * hp.head_dim;
    case dim::kv_out: return uint64_t{hp.n_head_kv} * hp.head_dim;
    case dim::ff: return hp.n_ff;
    case dim::head: return hp.head_dim;
    case dim::dn_conv: return dn.conv_dim();
    case dim::dn_value: return dn.value_dim();
    case dim::dn_vheads: return dn.n_v_heads;
    case dim::dn_kernel: return dn.kernel;
    case dim::dn_vdim: return dn.v_dim;
    case dim::ff_exp: return hp.n_ff_exp;
    case dim::ff_shexp: return hp.n_ff_shexp;
    case dim::expert: return hp.n_expert;
  }
  return 0;
}

bool wanted(const layer_tensor& t, const arch_flags& f, layer_kind kind) {
  if (t.in == kinds::attention && kind != layer_kind::attention) return false;
  if (t.in == kinds::delta_net && kind != layer_kind::delta_net) return false;
  switch (t.cond) {
    case layer_tensor::when::always: return true;
    case layer_tensor::when::qkv_bias: return f.qkv_bias;
    case layer_tensor::when::qk_norm: return f.qk_norm;
    case layer_tensor::when::plain: return !f.hybrid;
    case layer_tensor::when::hybrid: return f.hybrid;
    case layer_tensor::when::dense: return !f.moe;
    case layer_tensor::when::moe: return f.moe;
    case layer_tensor::when::shexp: return f.moe && f.shared_expert;
  }
  return false;
}

std::string key(const arch_spec& arch, std::string_view suffix) {
  std::string k(arch.name);
  k += '.';
  k += suffix;
  return k;
}

// A required u32 hyperparameter; the error names the key.
status read_u32(const gguf_file& f, const std::string& k, uint32_t& out) {
  auto v = f.get_uint(k);
  if (!v) return v.err();
  if (*v == 0 || *v > 0xffffffffull) return make_error("metadata key ", k, " has bad value ", *v);
  out = static_cast<uint32_t>(*v);
  return {};
}

// An optional u32 hyperparameter: absent keeps `out`; present but wrong is an error.
status read_u32_opt(const gguf_file& f, const std::string& k, uint32_t& out) {
  if (!f.find(k)) return {};
  return read_u32(f, k, out);
}

status read_f32_opt(const gguf_file& f, const std::string& k, float& out) {
  if (!f.find(k)) return {};
  auto v = f.get_float(k);
  if (!v) return v.err();
  if (!(*v > 0)) return make_error("metadata key ", k, " must be positive, got ", *v);
  out = static_cast<float>(*v);
  return {};
}

status read_vocab(const gguf_file& file, hparams& hp) {
  const gguf_tensor* embd = file.find_tensor("token_embd.weight");
  uint64_t n_tokens = 0;
  if (file.find("tokenizer.ggml.tokens")) {
    auto toks = file.get_string_array("tokenizer.ggml.tokens");
    if (!toks) return toks.err();
    n_tokens = toks->size();
  }
  if (embd) {
    if (embd->n_dims != 2) return make_error("tensor token_embd.weight must be 2-D");
    // Converters pad the vocabulary to the embedding rows; more tokens than rows cannot be embedded.
    if (n_tokens > embd->dims[1])
      return make_error("tokenizer.ggml.tokens has ", n_tokens, " entries but token_embd.weight has ",
                        embd->dims[1], " rows");
    n_tokens = embd->dims[1];
  }
  if (n_tokens == 0 || n_tokens > 0x7fffffffull)
    return make_error("cannot determine the vocabulary size (no token_embd.weight or tokens)");
  hp.n_vocab = static_cast<uint32_t>(n_tokens);
  return {};
}

// The hybrid keys: the ssm.* sizes, the attention interval and the RoPE sections.
status read_hybrid(const arch_spec& arch, const gguf_file& file, hparams& hp) {
  hp.full_attn_interval = 4;  // llama.cpp's default when the key is absent
  TANDEM_TRY(read_u32_opt(file, key(arch, "full_attention_interval"), hp.full_attn_interval));
  TANDEM_TRY(read_u32(file, key(arch, "ssm.conv_kernel"), hp.ssm_conv_kernel));
  TANDEM_TRY(read_u32(file, key(arch, "ssm.state_size"), hp.ssm_state));
  TANDEM_TRY(read_u32(file, key(arch, "ssm.group_count"), hp.ssm_groups));
  TANDEM_TRY(read_u32(file, key(arch, "ssm.time_step_rank"), hp.ssm_dt_rank));
  TANDEM_TRY(read_u32(file, key(arch, "ssm.inner_size"), hp.ssm_inner));
  const std::string sk = key(arch, "rope.dimension_sections");
  if (file.find(sk)) {
    auto v = file.get_int_array(sk);
    if (!v) return v.err();
    if (v->size() > 4) return make_error("metadata key ", sk, " has ", v->size(), " entries, at most 4");
    uint64_t sum = 0;
    for (size_t i = 0; i < v->size(); ++i) {
      if ((*v)[i] < 0 || (*v)[i] > 0xffff) return make_error("metadata key ", sk, " has bad entry ", (*v)[i]);
      hp.rope_sections[i] = static_cast<uint32_t>((*v)[i]);
      sum += hp.rope_sections[i];
    }
    // Sections count rotation pairs; text positions rotate every pair alike, so only the total matters.
    if (sum * 2 > hp.rope_dim)
      return make_error(sk, " covers ", sum * 2, " dims, more than ", key(arch, "rope.dimension_count"), " (",
                        hp.rope_dim, ")");
  }
  return check_hybrid_hparams(arch, hp);
}

status read_bool_opt(const gguf_file& f, const std::string& k, bool& out) {
  if (!f.find(k)) return {};
  auto v = f.get_bool(k);
  if (!v) return v.err();
  out = *v;
  return {};
}

// The expert keys, with llama.cpp's defaults for the widths (n_ff / k and n_ff).
status read_moe(const arch_spec& arch, const gguf_file& file, hparams& hp) {
  TANDEM_TRY(read_u32(file, key(arch, "expert_count"), hp.n_expert));
  TANDEM_TRY(read_u32(file, key(arch, "expert_used_count"), hp.n_expert_used));
  hp.n_ff_exp = hp.n_ff / hp.n_expert_used;
  TANDEM_TRY(read_u32_opt(file, key(arch, "expert_feed_forward_length"), hp.n_ff_exp));
  if (arch.flags.shared_expert) {
    hp.n_ff_shexp = hp.n_ff;
    TANDEM_TRY(read_u32_opt(file, key(arch, "expert_shared_feed_forward_length"), hp.n_ff_shexp));
  }
  hp.expert_weights_norm = true;
  TANDEM_TRY(read_bool_opt(file, key(arch, "expert_weights_norm"), hp.expert_weights_norm));
  return check_moe_hparams(arch, hp);
}

}  // namespace

uint32_t hparams::n_attention_layers() const {
  uint32_t n = 0;
  for (uint32_t il = 0; il < n_layer; ++il) n += kind(il) == layer_kind::attention;
  return n;
}

delta_net_shape delta_net_of(const hparams& hp) {
  delta_net_shape s;
  if (!hp.hybrid()) return s;
  s.n_k_heads = hp.ssm_groups;
  s.n_v_heads = hp.ssm_dt_rank;
  s.k_dim = hp.ssm_state;
  s.v_dim = hp.ssm_dt_rank ? hp.ssm_inner / hp.ssm_dt_rank : 0;
  s.kernel = hp.ssm_conv_kernel;
  return s;
}

status check_hybrid_hparams(const arch_spec& arch, const hparams& hp) {
  if (!arch.flags.hybrid) return {};
  const auto k = [&](std::string_view s) { return key(arch, s); };
  if (hp.full_attn_interval == 0) return make_error(k("full_attention_interval"), " must be positive");
  if (hp.ssm_conv_kernel < 2 || hp.ssm_conv_kernel > 8)
    return make_error(k("ssm.conv_kernel"), " (", hp.ssm_conv_kernel, ") must be 2..8");
  if (hp.ssm_groups == 0 || hp.ssm_dt_rank == 0 || hp.ssm_dt_rank % hp.ssm_groups != 0)
    return make_error(k("ssm.time_step_rank"), " (", hp.ssm_dt_rank, " value heads) must be a positive multiple of ",
                      k("ssm.group_count"), " (", hp.ssm_groups, " key heads)");
  if (hp.ssm_inner == 0 || hp.ssm_inner % hp.ssm_dt_rank != 0)
    return make_error(k("ssm.inner_size"), " (", hp.ssm_inner, ") is not a multiple of ", k("ssm.time_step_rank"),
                      " (", hp.ssm_dt_rank, ")");
  const uint32_t dv = hp.ssm_inner / hp.ssm_dt_rank;
  if (hp.ssm_state % 8 != 0 || dv % 8 != 0 || hp.ssm_state > 256 || dv > 256)
    return make_error("DeltaNet head sizes (", k("ssm.state_size"), " ", hp.ssm_state, ", value ", dv,
                      ") must be multiples of 8 up to 256");
  return {};
}

status check_moe_hparams(const arch_spec& arch, const hparams& hp) {
  if (!arch.flags.moe) return {};
  const auto k = [&](std::string_view s) { return key(arch, s); };
  // 65536 experts would already be 100x any released model; the bound keeps products in range.
  if (hp.n_expert == 0 || hp.n_expert > 65536)
    return make_error(k("expert_count"), " (", hp.n_expert, ") must be 1..65536");
  if (hp.n_expert_used == 0 || hp.n_expert_used > hp.n_expert)
    return make_error(k("expert_used_count"), " (", hp.n_expert_used, ") must be 1..", k("expert_count"), " (",
                      hp.n_expert, ")");
  if (hp.n_ff_exp == 0)
    return make_error(k("expert_feed_forward_length"), " is missing or zero (and ", k("feed_forward_length"), " / ",
                      k("expert_used_count"), " gives no default)");
  if (arch.flags.shared_expert && hp.n_ff_shexp == 0)
    return make_error(k("expert_shared_feed_forward_length"), " is missing or zero (and ", k("feed_forward_length"),
                      " gives no default)");
  return {};
}

const arch_spec* find_arch(std::string_view name) {
  for (const auto& a : k_archs)
    if (a.name == name) return &a;
  return nullptr;
}

std::vector<std::string_view> known_archs() {
  std::vector<std::string_view> out;
  for (const auto& a : k_archs) out.push_back(a.name);
  return out;
}

std::vector<tensor_spec> expected_tensors(const arch_spec& arch, const hparams& hp) {
  std::vector<tensor_spec> out;
  out.push_back({"token_embd.weight", {hp.n_embd, hp.n_vocab}, tensor_role::embedding, -1});
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    for (const auto& t : k_layer_tensors) {
      if (!wanted(t, arch.flags, hp.kind(l))) continue;
      tensor_spec s;
      s.name = "blk." + std::to_string(l) + "." + std::string(t.stem) + std::string(t.suffix);
      for (int d = 0; d < t.rank; ++d) s.shape.push_back(dim_value(t.shape[d], hp, arch.flags.hybrid));
      s.role = t.role;
      s.layer = static_cast<int>(l);
      s.slot = t.slot;
      out.push_back(std::move(s));
    }
  }
  out.push_back({"output_norm.weight", {hp.n_embd}, tensor_role::norm, -1});
  if (!hp.tied_output)
    out.push_back({"output.weight", {hp.n_embd, hp.n_vocab}, tensor_role::matrix, -1});
  return out;
}

result<hparams> read_hparams(const arch_spec& arch, const gguf_file& file) {
  hparams hp;
  TANDEM_TRY(read_vocab(file, hp));
  TANDEM_TRY(read_u32(file, key(arch, "context_length"), hp.n_ctx_train));
  TANDEM_TRY(read_u32(file, key(arch, "embedding_length"), hp.n_embd));
  TANDEM_TRY(read_u32(file, key(arch, "block_count"), hp.n_layer));
  // MoE files need no dense FFN width (llama.cpp's qwen35moe converter writes none).
  if (arch.flags.moe) TANDEM_TRY(read_u32_opt(file, key(arch, "feed_forward_length"), hp.n_ff));
  else TANDEM_TRY(read_u32(file, key(arch, "feed_forward_length"), hp.n_ff));
  TANDEM_TRY(read_u32(file, key(arch, "attention.head_count"), hp.n_head));
  hp.n_head_kv = hp.n_head;  // llama.cpp's default when the key is absent
  TANDEM_TRY(read_u32_opt(file, key(arch, "attention.head_count_kv"), hp.n_head_kv));
  if (hp.n_head % hp.n_head_kv != 0)
    return make_error(key(arch, "attention.head_count"), " (", hp.n_head, ") is not a multiple of ",
                      key(arch, "attention.head_count_kv"), " (", hp.n_head_kv, ")");
  if (hp.n_embd % hp.n_head != 0 && !file.find(key(arch, "attention.key_length")))
    return make_error(key(arch, "embedding_length"), " is not a multiple of the head count and ",
                      key(arch, "attention.key_length"), " is missing");
  hp.head_dim = hp.n_embd / hp.n_head;
  TANDEM_TRY(read_u32_opt(file, key(arch, "attention.key_length"), hp.head_dim));
  if (hp.head_dim == 0) return make_error("head size is zero (", key(arch, "embedding_length"),
                                          " smaller than the head count)");
  uint32_t v_dim = hp.head_dim;
  TANDEM_TRY(read_u32_opt(file, key(arch, "attention.value_length"), v_dim));
  if (v_dim != hp.head_dim)
    return make_error(key(arch, "attention.value_length"), " (", v_dim, ") differs from ",
                      key(arch, "attention.key_length"), " (", hp.head_dim, "); not supported");
  hp.rope_dim = hp.head_dim;
  TANDEM_TRY(read_u32_opt(file, key(arch, "rope.dimension_count"), hp.rope_dim));
  if (hp.rope_dim > hp.head_dim || hp.rope_dim % 2 != 0)
    return make_error(key(arch, "rope.dimension_count"), " (", hp.rope_dim,
                      ") must be even and at most the head size ", hp.head_dim);
  // llama.cpp stores 1e-5 as Llama's default; converters always write the key.
  TANDEM_TRY(read_f32_opt(file, key(arch, "attention.layer_norm_rms_epsilon"), hp.rms_eps));
  TANDEM_TRY(read_f32_opt(file, key(arch, "rope.freq_base"), hp.rope_theta));
  hp.tied_output = file.find_tensor("output.weight") == nullptr;
  if (arch.flags.hybrid) TANDEM_TRY(read_hybrid(arch, file, hp));
  if (arch.flags.moe) TANDEM_TRY(read_moe(arch, file, hp));
  return hp;
}

void write_hparams(const arch_spec& arch, const hparams& hp, gguf_writer& out) {
  out.set_string("general.architecture", std::string(arch.name));
  out.set_u32(key(arch, "vocab_size"), hp.n_vocab);
  out.set_u32(key(arch, "context_length"), hp.n_ctx_train);
  out.set_u32(key(arch, "embedding_length"), hp.n_embd);
  out.set_u32(key(arch, "block_count"), hp.n_layer);
  if (hp.n_ff || !arch.flags.moe) out.set_u32(key(arch, "feed_forward_length"), hp.n_ff);
  out.set_u32(key(arch, "attention.head_count"), hp.n_head);
  out.set_u32(key(arch, "attention.head_count_kv"), hp.n_head_kv);
  out.set_u32(key(arch, "attention.key_length"), hp.head_dim);
  out.set_u32(key(arch, "attention.value_length"), hp.head_dim);
  out.set_u32(key(arch, "rope.dimension_count"), hp.rope_dim ? hp.rope_dim : hp.head_dim);
  out.set_f32(key(arch, "attention.layer_norm_rms_epsilon"), hp.rms_eps);
  out.set_f32(key(arch, "rope.freq_base"), hp.rope_theta);
  if (arch.flags.moe) {
    out.set_u32(key(arch, "expert_count"), hp.n_expert);
    out.set_u32(key(arch, "expert_used_count"), hp.n_expert_used);
    out.set_u32(key(arch, "expert_feed_forward_length"), hp.n_ff_exp);
    if (arch.flags.shared_expert) out.set_u32(key(arch, "expert_shared_feed_forward_length"), hp.n_ff_shexp);
    out.set_bool(key(arch, "expert_weights_norm"), hp.expert_weights_norm);
  }
  if (!arch.flags.hybrid) return;
  out.set_u32(key(arch, "full_attention_interval"), hp.full_attn_interval);
  out.set_u32(key(arch, "ssm.conv_kernel"), hp.ssm_conv_kernel);
  out.set_u32(key(arch, "ssm.state_size"), hp.ssm_state);
  out.set_u32(key(arch, "ssm.group_count"), hp.ssm_groups);
  out.set_u32(key(arch, "ssm.time_step_rank"), hp.ssm_dt_rank);
  out.set_u32(key(arch, "ssm.inner_size"), hp.ssm_inner);
  out.set(key(arch, "rope.dimension_sections"),
          gguf_i32_array({int32_t(hp.rope_sections[0]), int32_t(hp.rope_sections[1]), int32_t(hp.rope_sections[2]),
                          int32_t(hp.rope_sections[3])}));
}

// The CUDA backend keeps the routed experts and the recurrent state with one device's layers;
// neither a layer nor a tensor split carries them yet.
std::string split_unsupported(std::string_view arch_name, const hparams& hp) {
  const char* what = hp.moe() ? "mixture of experts" : hp.hybrid() ? "Gated DeltaNet hybrid" : nullptr;
  if (!what) return {};
  return "splitting " + std::string(arch_name) + " (" + what + ") over several GPUs is not supported yet";
}

}  // namespace tandem
