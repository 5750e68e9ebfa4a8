// Architectures described as data: each names its metadata keys, its tensors (with shapes derived from
// the hyperparameters) and its feature flags. The loader, `tandem-model make` and the importer all read
// these tables, so an architecture is added here and nowhere else.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "model/layer_weights.h"

namespace tandem {

class gguf_file;
class gguf_writer;

enum class rope_style { normal, neox };  // normal: rotate pairs (2i, 2i+1); neox: halves (i, i+d/2)

struct arch_flags {
  bool qk_norm = false;   // per-head RMSNorm on q and k before RoPE (qwen3, qwen35)
  bool qkv_bias = false;  // biases on attn_q/k/v (qwen2)
  rope_style rope = rope_style::normal;
  // Hybrid (qwen35): Gated DeltaNet layers with a full-attention layer every full_attn_interval;
  // attention layers carry an output gate in attn_q ([q, gate] per head) and the FFN norm is
  // named post_attention_norm.
  bool hybrid = false;
  // Mixture of experts (qwen3moe, qwen35moe): every layer's FFN is n_expert routed SwiGLU experts
  // (ffn_gate_inp router, 3-D ffn_{gate,up,down}_exps) in place of ffn_gate/up/down; with
  // shared_expert one more SwiGLU FFN (ffn_*_shexp) is added, scaled by sigmoid(ffn_gate_inp_shexp·x).
  bool moe = false;
  bool shared_expert = false;
};

// Hyperparameters as llama.cpp names them under "<arch>." keys.
struct hparams {
  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;    // .context_length
  uint32_t n_embd = 0;         // .embedding_length
  uint32_t n_layer = 0;        // .block_count
  uint32_t n_ff = 0;           // .feed_forward_length
  uint32_t n_head = 0;         // .attention.head_count
  uint32_t n_head_kv = 0;      // .attention.head_count_kv
  uint32_t head_dim = 0;       // .attention.key_length (= value_length); default n_embd / n_head
  uint32_t rope_dim = 0;       // .rope.dimension_count; default head_dim
  float rms_eps = 1e-6f;       // .attention.layer_norm_rms_epsilon
  float rope_theta = 10000.f;  // .rope.freq_base
  bool tied_output = false;    // no "output.weight": the head reuses token_embd
  // Hybrid architectures only (0 elsewhere).
  uint32_t full_attn_interval = 0;  // .full_attention_interval: layer i attends iff (i+1) % it == 0
  uint32_t ssm_conv_kernel = 0;     // .ssm.conv_kernel (K)
  uint32_t ssm_state = 0;           // .ssm.state_size: key head size dk
  uint32_t ssm_groups = 0;          // .ssm.group_count: key heads Hk
  uint32_t ssm_dt_rank = 0;         // .ssm.time_step_rank: value heads Hv
  uint32_t ssm_inner = 0;           // .ssm.inner_size: Hv · dv
  std::array<uint32_t, 4> rope_sections{};  // .rope.dimension_sections (multi-section RoPE)
  // Mixture-of-experts architectures only (0 elsewhere). n_ff is then optional (qwen35moe files
  // have no feed_forward_length) and unused: the experts have their own width.
  uint32_t n_expert = 0;       // .expert_count
  uint32_t n_expert_used = 0;  // .expert_used_count: experts per token (k)
  uint32_t n_ff_exp = 0;       // .expert_feed_forward_length; default n_ff / n_expert_used (llama.cpp)
  uint32_t n_ff_shexp = 0;     // .expert_shared_feed_forward_length; default n_ff; 0 without a shared expert
  // Whether the k routing weights are renormalised to sum 1 (.expert_weights_norm; llama.cpp
  // always does for qwen3moe and qwen35moe, so absent means true there).
  bool expert_weights_norm = false;

  bool hybrid() const { return full_attn_interval != 0; }
  layer_kind kind(uint32_t il) const {
    return !hybrid() || (il + 1) % full_attn_interval == 0 ? layer_kind::attention : layer_kind::delta_net;
  }
  uint32_t n_attention_layers() const;
  uint32_t n_delta_net_layers() const { return n_layer - n_attention_layers(); }
  bool moe() const { return n_expert != 0; }
};

// The sizes of one Gated DeltaNet layer, derived from the ssm.* hyperparameters.
struct delta_net_shape {
  uint32_t n_k_heads = 0, n_v_heads = 0;  // Hk, Hv (Hv a multiple of Hk)
  uint32_t k_dim = 0, v_dim = 0;          // dk, dv per head
  uint32_t kernel = 0;                    // conv kernel K
  uint32_t key_dim() const { return n_k_heads * k_dim; }
  uint32_t value_dim() const { return n_v_heads * v_dim; }
  uint32_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // channels: q, k, v
  // Per sequence and layer, fp32: the last K-1 inputs of the conv, and S (Hv × dk × dv).
  uint64_t conv_state_floats() const { return uint64_t(kernel - 1) * conv_dim(); }
  uint64_t ssm_state_floats() const { return uint64_t(n_v_heads) * k_dim * v_dim; }
};
delta_net_shape delta_net_of(const hparams& hp);

enum class tensor_role {
  embedding,
  norm,    // a norm's weight (f32 in files)
  matrix,
  bias,
  conv,    // a depthwise conv kernel {K, channels} (f32)
  decay,   // a negative per-head rate (ssm_a = -exp(A_log), f32)
  router,  // an MoE gate: ffn_gate_inp {n_embd, n_expert}, ffn_gate_inp_shexp {n_embd}; kept float
           // (llama.cpp's converter writes them F32 and llama-quantize leaves them)
};
// Whether files keep tensors of this role quantized (matrices) or as float vectors.
inline bool role_is_matrix(tensor_role r) { return r == tensor_role::matrix || r == tensor_role::embedding; }

struct tensor_spec {
  std::string name;             // "blk.3.attn_q.weight"
  std::vector<uint64_t> shape;  // GGUF order: shape[0] contiguous (n_in for matrices)
  tensor_role role = tensor_role::matrix;
  int layer = -1;               // -1 for global tensors
  const gguf_tensor* layer_weights::*slot = nullptr;  // where bind_model puts a layer tensor
};

struct arch_spec {
  std::string_view name;  // "llama", "qwen2", "qwen3", "qwen35", "qwen3moe", "qwen35moe"
  arch_flags flags;
};

const arch_spec* find_arch(std::string_view name);
std::vector<std::string_view> known_archs();

// Every tensor the architecture needs for these hyperparameters, in llama.cpp's converter order
// (token_embd, per layer ..., output_norm, output unless tied).
std::vector<tensor_spec> expected_tensors(const arch_spec& arch, const hparams& hp);

// Reads "<arch>.*" keys (and the vocab size from tokenizer.ggml.tokens or token_embd);
// a missing or mistyped key, or hyperparameters that contradict each other, is an error naming it.
result<hparams> read_hparams(const arch_spec& arch, const gguf_file& file);
// Checks the hybrid (ssm.*) hyperparameters against each other; read_hparams calls it.
status check_hybrid_hparams(const arch_spec& arch, const hparams& hp);
// Checks the expert hyperparameters (counts and widths) against each other; read_hparams calls it.
status check_moe_hparams(const arch_spec& arch, const hparams& hp);
// Writes general.architecture and the "<arch>.*" keys as llama.cpp's converter does.
void write_hparams(const arch_spec& arch, const hparams& hp, gguf_writer& out);

// Why a model of this architecture cannot be split over several GPUs yet ("splitting qwen35moe
// (mixture of experts) over several GPUs is not supported yet"), or empty when it can. The one
// answer the CUDA backend, the model instance and the memory plan's notes share.
std::string split_unsupported(std::string_view arch_name, const hparams& hp);

}  // namespace tandem
