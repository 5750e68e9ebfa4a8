// The weights of one block, as views of an open GGUF file's tensors. Which of them an architecture
// and a layer kind need is stated once, in the tensor table of model/arch_spec.cpp.
#pragma once

namespace tandem {

struct gguf_tensor;

// What a layer's mixer is: softmax attention over the KV cache, or a Gated DeltaNet with a
// recurrent state per sequence (qwen35's linear-attention layers).
enum class layer_kind { attention, delta_net };

// Optional members are nullptr when the arch or the layer kind lacks them.
struct layer_weights {
  const gguf_tensor* attn_norm = nullptr;
  // Attention layers.
  const gguf_tensor* wq = nullptr;  // hybrid: rows [q(D), gate(D)] per head
  const gguf_tensor* wk = nullptr;
  const gguf_tensor* wv = nullptr;
  const gguf_tensor* bq = nullptr;  // qkv_bias
  const gguf_tensor* bk = nullptr;
  const gguf_tensor* bv = nullptr;
  const gguf_tensor* q_norm = nullptr;  // qk_norm
  const gguf_tensor* k_norm = nullptr;
  const gguf_tensor* wo = nullptr;
  // Gated DeltaNet layers.
  const gguf_tensor* dn_qkv = nullptr;      // attn_qkv: x -> conv channels [q, k, v]
  const gguf_tensor* dn_gate = nullptr;     // attn_gate: x -> z (Hv·dv)
  const gguf_tensor* dn_conv = nullptr;     // ssm_conv1d {K, conv_dim}
  const gguf_tensor* dn_dt_bias = nullptr;  // ssm_dt.bias {Hv}
  const gguf_tensor* dn_a = nullptr;        // ssm_a {Hv}, = -exp(A_log)
  const gguf_tensor* dn_beta = nullptr;     // ssm_beta: x -> b (Hv)
  const gguf_tensor* dn_alpha = nullptr;    // ssm_alpha: x -> a (Hv)
  const gguf_tensor* dn_norm = nullptr;     // ssm_norm {dv}
  const gguf_tensor* dn_out = nullptr;      // ssm_out: Hv·dv -> n_embd
  // FFN (every layer).
  const gguf_tensor* ffn_norm = nullptr;  // hybrid: post_attention_norm
  // Dense FFN (absent in MoE layers).
  const gguf_tensor* ffn_gate = nullptr;
  const gguf_tensor* ffn_up = nullptr;
  const gguf_tensor* ffn_down = nullptr;
  // MoE FFN (n_expert > 0). The expert tensors are 3-D in GGUF order (dims[0] contiguous): expert e
  // of ffn_gate_exps / ffn_up_exps {n_embd, n_ff_exp, n_expert} is rows [e·n_ff_exp, (e+1)·n_ff_exp)
  // of n_embd elements; of ffn_down_exps {n_ff_exp, n_embd, n_expert} rows [e·n_embd, (e+1)·n_embd)
  // of n_ff_exp elements. Each expert is an ordinary {n_in, n_out} matrix at a row offset.
  const gguf_tensor* ffn_gate_inp = nullptr;   // router {n_embd, n_expert}: logits = W·x (float type)
  const gguf_tensor* ffn_gate_exps = nullptr;  // {n_embd, n_ff_exp, n_expert}
  const gguf_tensor* ffn_up_exps = nullptr;    // {n_embd, n_ff_exp, n_expert}
  const gguf_tensor* ffn_down_exps = nullptr;  // {n_ff_exp, n_embd, n_expert}
  // Shared expert (arch_flags::shared_expert): every token, scaled by sigmoid(ffn_gate_inp_shexp·x).
  const gguf_tensor* ffn_gate_inp_shexp = nullptr;  // {n_embd} (float type; files may add a unit dim)
  const gguf_tensor* ffn_gate_shexp = nullptr;      // {n_embd, n_ff_shexp}
  const gguf_tensor* ffn_up_shexp = nullptr;        // {n_embd, n_ff_shexp}
  const gguf_tensor* ffn_down_shexp = nullptr;      // {n_ff_shexp, n_embd}
};

}  // namespace tandem
