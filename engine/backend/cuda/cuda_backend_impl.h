// Internal to the CUDA backend: the one-GPU stage class, whose members are defined in
// cuda_backend.cpp (batch flow, matmuls, attention, FFN) and cuda_hybrid_block.cpp (the Gated
// DeltaNet block and the pieces of gated attention of hybrid models).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_batch_plan.h"
#include "backend/cuda/cuda_collective.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_graph_cache.h"
#include "backend/cuda/cuda_kv_cache.h"
#include "backend/cuda/cuda_profile.h"
#include "backend/cuda/cuda_stage.h"
#include "backend/cuda/cuda_weights.h"
#include "kernels/cuda_check.h"

namespace tandem {

struct moe_shared_term;  // kernels/moe.h
struct moe_next_norm;    // kernels/moe.h

class cuda_backend final : public cuda_stage {
 public:
  cuda_backend(const model_desc& desc, std::unique_ptr<cuda_context> ctx, const weight_range& range);
  ~cuda_backend() override {
    if (done_) TANDEM_CUDA_LOG(cudaEventDestroy(done_));
  }

  status init(const cuda_backend_options& opt);

  std::string_view name() const override { return "cuda"; }
  const model_desc& model() const override { return desc_; }
  const cuda_load_stats& load_stats() const override { return stats_; }
  uint64_t weight_bytes_per_token() const override { return bytes_per_token_; }
  uint64_t state_bytes_per_token() const override { return state_bytes_per_token_; }
  uint64_t graph_replays() const override { return graphs_.replays(); }

  result<std::unique_ptr<kv_cache>> make_cache(const kv_cache_config& cfg) override;

  status forward(const batch& b, kv_cache& cache, std::vector<float>& logits) override {
    TANDEM_TRY(run(b, cache, false));
    TANDEM_TRY(copy_out(&logits, nullptr));
    return finish_states();
  }

  status forward_argmax(const batch& b, kv_cache& cache, std::vector<int32_t>& ids) override {
    TANDEM_TRY(run(b, cache, true));
    TANDEM_TRY(copy_out(nullptr, &ids));
    return finish_states();
  }

 private:
  // Validates and plans the batch, then enqueues its forward pass (and, with argmax, the argmax
  // of each logits row into ids_); decode-sized steps replay as captured graphs.
  status run(const batch& b, kv_cache& cache_base, bool argmax);

 public:
  status run_stage(const batch& b, const kv_cache& book, kv_cache& part, const input& in, bool argmax) override;
  status prepare_stage(const batch& b, const kv_cache& book) override {
    TANDEM_TRY(ctx_->activate());
    return prepare(b, book);
  }
  status launch_stage(kv_cache& part, bool argmax) override;
  void set_collective(cuda_collective* comm, int lead_rank) override { comm_ = comm, lead_rank_ = lead_rank; }
  cudaStream_t stream() const override { return ctx_->stream(); }
  const float* hidden() const override { return x_.get<float>(); }
  cudaEvent_t done() const override { return done_; }
  int device() const override { return ctx_->device(); }
  status copy_out(std::vector<float>* logits, std::vector<int32_t>* ids) override;

 private:
  status prepare(const batch& b, const kv_cache& book);
  status launch_step(cuda_kv_cache& cache, bool argmax);
  status enqueue(cuda_kv_cache& cache, bool argmax);
  graph_key step_key(const cuda_kv_cache& cache, bool argmax) const;
  status ensure_scratch(int n_tok);
  status layer(uint32_t il, cuda_kv_cache& cache);
  status attention_block(uint32_t il, cuda_kv_cache& cache);
  status ffn_block(uint32_t il);
  status clear_partial();
  status reduce_partial();
  bool adds_residual() const { return !comm_ || range_.embedding; }
  status attention(uint32_t il, cuda_kv_cache& cache, bool quantize_out = false);
  status attention_runs(uint32_t il, cuda_kv_cache& cache);
  // y = W·x, or with add y += W·x.
  status matmul(const device_matrix& w, const float* x, int n_tok, float* y, bool add = false);
  status x_to_f16(const float* x, int64_t n);
  status try_qgemm(const device_matrix& w, const float* x, int n_tok, float* y, bool add, bool& done);
  status output_head(const float* x, int n_tok, float* y);
  struct matmul_job {
    const device_matrix* w;
    float* y;
  };
  status matmul_fused(std::initializer_list<matmul_job> jobs, const float* x, int n_tok, bool add,
                      bool x_f16_kept = false);
  bool matvec_ready(std::initializer_list<const device_matrix*> ws, int n_tok) const;
  status matvec_quantized(std::initializer_list<matmul_job> jobs, const float* x, int n_tok, bool add,
                          void* work = nullptr, cudaStream_t s = nullptr);
  status matvec_job_list(const matmul_job* jobs, int n_jobs, const float* x, int n_tok, bool add, void* work,
                         cudaStream_t s);
  status matvec_quantized_beside(std::initializer_list<matmul_job> jobs, const float* x, int n_tok, bool& forked);
  const int32_t* dev_ints(size_t off) const { return ints_.get<int32_t>() + off; }

  // Hybrid models (cuda_hybrid_block.cpp).
  bool hybrid() const { return hp_.hybrid(); }
  status delta_net_block(uint32_t il, cuda_kv_cache& cache);
  status ensure_hybrid_scratch(int n_tok);
  // Gated attention: splits wq's [q, gate] rows into q_ and attn_gate_; gates att_ before wo.
  status split_q_gate(int n_tok);
  status gate_attention(int n_tok, bool quantize);  // quantize: also att's int8 copy for wo's mat-vec
  // Marks the batch's sequences' states unknown before a step that updates them, and records
  // their new lengths once the step has completed (forward's copy_out synchronised).
  void begin_states(const batch& b, cuda_kv_cache& cache);
  status finish_states();

  // Mixture-of-experts models (cuda_moe_block.cpp).
  bool moe() const { return hp_.moe(); }
  status moe_block(uint32_t il);
  status ensure_moe_scratch(int n_tok);
  status route(const device_layer& L, const float* xn, int n_tok, bool logits_ready);
  status moe_experts_decode(const device_layer& L, const float* xn, int n_tok, bool x_quantized, bool with_down);
  status moe_experts_prefill(const device_layer& L, const float* xn, int n_tok);
  bool shared_expert_decodes(const device_layer& L, int n_tok, bool x_quantized) const;
  status moe_shared_expert(const device_layer& L, const float* xn, int n_tok, bool x_quantized, bool xn_f16,
                           moe_shared_term& sh);
  status moe_shared_expert_decode(const device_layer& L, const float* xn, int n_tok, bool side, moe_shared_term& sh);

  model_desc desc_;
  std::unique_ptr<cuda_context> ctx_;
  device_weights w_;
  cuda_load_stats stats_;
  uint64_t bytes_per_token_ = 0;
  uint64_t state_bytes_per_token_ = 0;  // recurrent state read and written per decode token
  batch_plan plan_;
  pinned_buffer ints_host_;
  device_buffer ints_, ids_;
  // Activations: residual x, normed xn, q/k/v, attention output, tmp, FFN gate/up, fp16 copies.
  device_buffer x_, xn_, q_, k_, v_, att_, tmp_, gate_, up_, xh_, xo_, logits_;
  device_buffer weight_tile_, attn_work_;
  // While matmul_fused runs its jobs (they share x), xh_ keeps the fp16 copy of xh_src_; every
  // other matmul converts its own x.
  bool xh_reuse_ = false;
  const float* xh_src_ = nullptr;
  // Prefill passes: the step's RoPE rotations per token (launch_rope_table), which every
  // attention layer's fused norm + RoPE + store reads; rot_ready_ when this step computed them.
  device_buffer rot_;
  bool rot_ready_ = false;
  device_buffer matvec_work_;  // int8 copy of a mat-vec's x (launch_matvec's workspace)
  device_buffer qgemm_work_;   // the decode-batch GEMM's partial sums (kernels/qgemm.h)
  size_t qgemm_floats_ = 0;    // their floats per token for this device's largest need
  // Hybrid models: wq's output [q, gate] and the gate; the DeltaNet's qkv, conv output u, z, the
  // gate inputs b and a, the gates g and beta, the rule's output o and the gated norm's y; the
  // chunked rule's workspace (dn_work_, for steps long enough to use it).
  device_buffer qg_, attn_gate_, dn_qkv_, dn_u_, dn_z_, dn_b_, dn_a_, dn_o_, dn_y_, dn_work_;
  // MoE layers: router logits, each token's k expert ids and weights, the (token, slot) rows'
  // gate/up and down outputs, prefill's grouping (counts, offsets, tile offsets, perm), and the
  // experts' own workspace (the int8 copy of x, or fp16 x and the grouping's histograms).
  device_buffer moe_logits_, moe_ids_, moe_w_, moe_gate_, moe_up_, moe_y_, moe_group_, moe_work_;
  device_buffer shexp_work_;  // decode's shared expert on the side stream: the int8 copy of its h
  device_buffer shexp_logit_;  // decode's shared expert: its float32 gate's logit a token
  bool side_stream_ = true;   // TANDEM_CUDA_SIDE_STREAM=0: decode on the main stream alone
  bool fused_swiglu_ = true;  // TANDEM_CUDA_FUSED_SWIGLU=0: decode's expert SwiGLU as its own launch
  bool down_combine_ = true;  // TANDEM_MOE_DOWN_COMBINE=0: decode's combine as a launch after down
  bool router_norm_ = true;   // TANDEM_MOE_ROUTER_NORM=0: decode's FFN norm as a launch before the router
  // The layer whose input norm the previous layer's combine wrote (-1: none this step).
  int64_t norm_folded_ = -1;
  bool next_norm_foldable(uint32_t il, int n_tok, moe_next_norm& nn) const;
  int scratch_tokens_ = 0;
  cuda_graph_cache graphs_;
  bool use_graphs_ = true;
  bool head_int8_ = false;   // TANDEM_CUDA_HEAD_INT8=1: the head reads the int8 copy of x
  bool head_float_ = false;  // TANDEM_CUDA_HEAD_FLOAT=1: the head reads x as floats
  cuda_step_profile* profile_ = nullptr;  // bench --profile: times per launch group
  status mark(const char* label) { return profile_ ? profile_->mark(label, ctx_->stream()) : status{}; }
  weight_range range_;
  hparams hp_;  // the model's, with this device's share of heads and FFN columns
  cudaEvent_t done_ = nullptr;  // recorded after each step (layer split hand-over)
  // Tensor split: sums the partial outputs of attention and FFN over the devices; the lead
  // (range_.embedding) adds them to the residual stream and broadcasts the embeddings.
  cuda_collective* comm_ = nullptr;
  int lead_rank_ = 0;
  // The step in flight of a hybrid model: its cache and sequences (finish_states).
  cuda_kv_cache* state_cache_ = nullptr;
  std::vector<int32_t> state_seqs_;
};

}  // namespace tandem
