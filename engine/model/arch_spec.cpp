// Architecture tables (llama, qwen2, qwen3): llama.cpp's metadata keys and tensor names, with the
// shapes each tensor must have for given hyperparameters.
#include "model/arch_spec.h"

#include <array>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

namespace tandem {
namespace {

// Rope style facts (llama.cpp): LLM_ARCH_LLAMA uses LLAMA_ROPE_TYPE_NORM (adjacent pairs); its
// converter permutes the rows of q and k so that this matches Hugging Face's rotate_half. Qwen2
// and Qwen3 are converted without that permutation and use LLAMA_ROPE_TYPE_NEOX (halves).
constexpr std::array<arch_spec, 3> k_archs = {{
    {"llama", arch_flags{.qk_norm = false, .qkv_bias = false, .rope = rope_style::normal}},
    {"qwen2", arch_flags{.qk_norm = false, .qkv_bias = true, .rope = rope_style::neox}},
    {"qwen3", arch_flags{.qk_norm = true, .qkv_bias = false, .rope = rope_style::neox}},
}};

// Which dimension a layer tensor's shape is built from.
enum class dim { embd, q_out, kv_out, ff, head };

struct layer_tensor {
  std::string_view stem;  // "attn_q"; the name is blk.N.<stem>.<weight|bias>
  tensor_role role;
  std::array<dim, 2> shape;
  int rank;
  enum class when { always, qkv_bias, qk_norm } cond;
};

// Per-layer tensors in the order llama.cpp's tensor table lists them.
constexpr layer_tensor k_layer_tensors[] = {
    {"attn_norm", tensor_role::norm, {dim::embd, dim::embd}, 1, layer_tensor::when::always},
    {"attn_q", tensor_role::matrix, {dim::embd, dim::q_out}, 2, layer_tensor::when::always},
    {"attn_q", tensor_role::bias, {dim::q_out, dim::q_out}, 1, layer_tensor::when::qkv_bias},
    {"attn_k", tensor_role::matrix, {dim::embd, dim::kv_out}, 2, layer_tensor::when::always},
    {"attn_k", tensor_role::bias, {dim::kv_out, dim::kv_out}, 1, layer_tensor::when::qkv_bias},
    {"attn_v", tensor_role::matrix, {dim::embd, dim::kv_out}, 2, layer_tensor::when::always},
    {"attn_v", tensor_role::bias, {dim::kv_out, dim::kv_out}, 1, layer_tensor::when::qkv_bias},
    {"attn_q_norm", tensor_role::norm, {dim::head, dim::head}, 1, layer_tensor::when::qk_norm},
    {"attn_k_norm", tensor_role::norm, {dim::head, dim::head}, 1, layer_tensor::when::qk_norm},
    {"attn_output", tensor_role::matrix, {dim::q_out, dim::embd}, 2, layer_tensor::when::always},
    {"ffn_norm", tensor_role::norm, {dim::embd, dim::embd}, 1, layer_tensor::when::always},
    {"ffn_gate", tensor_role::matrix, {dim::embd, dim::ff}, 2, layer_tensor::when::always},
    {"ffn_up", tensor_role::matrix, {dim::embd, dim::ff}, 2, layer_tensor::when::always},
    {"ffn_down", tensor_role::matrix, {dim::ff, dim::embd}, 2, layer_tensor::when::always},
};

uint64_t dim_value(dim d, const hparams& hp) {
  switch (d) {
    case dim::embd: return hp.n_embd;
    case dim::q_out: return uint64_t{hp.n_head} * hp.head_dim;
    case dim::kv_out: return uint64_t{hp.n_head_kv} * hp.head_dim;
    case dim::ff: return hp.n_ff;
    case dim::head: return hp.head_dim;
  }
  return 0;
}

bool wanted(const layer_tensor& t, const arch_flags& f) {
  switch (t.cond) {
    case layer_tensor::when::always: return true;
    case layer_tensor::when::qkv_bias: return f.qkv_bias;
    case layer_tensor::when::qk_norm: return f.qk_norm;
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

}  // namespace

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
      if (!wanted(t, arch.flags)) continue;
      tensor_spec s;
      s.name = "blk." + std::to_string(l) + "." + std::string(t.stem) +
               (t.role == tensor_role::bias ? ".bias" : ".weight");
      for (int d = 0; d < t.rank; ++d) s.shape.push_back(dim_value(t.shape[d], hp));
      s.role = t.role;
      s.layer = static_cast<int>(l);
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
  TANDEM_TRY(read_u32(file, key(arch, "feed_forward_length"), hp.n_ff));
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
  return hp;
}

void write_hparams(const arch_spec& arch, const hparams& hp, gguf_writer& out) {
  out.set_string("general.architecture", std::string(arch.name));
  out.set_u32(key(arch, "vocab_size"), hp.n_vocab);
  out.set_u32(key(arch, "context_length"), hp.n_ctx_train);
  out.set_u32(key(arch, "embedding_length"), hp.n_embd);
  out.set_u32(key(arch, "block_count"), hp.n_layer);
  out.set_u32(key(arch, "feed_forward_length"), hp.n_ff);
  out.set_u32(key(arch, "attention.head_count"), hp.n_head);
  out.set_u32(key(arch, "attention.head_count_kv"), hp.n_head_kv);
  out.set_u32(key(arch, "attention.key_length"), hp.head_dim);
  out.set_u32(key(arch, "attention.value_length"), hp.head_dim);
  out.set_u32(key(arch, "rope.dimension_count"), hp.rope_dim ? hp.rope_dim : hp.head_dim);
  out.set_f32(key(arch, "attention.layer_norm_rms_epsilon"), hp.rms_eps);
  out.set_f32(key(arch, "rope.freq_base"), hp.rope_theta);
}

}  // namespace tandem
