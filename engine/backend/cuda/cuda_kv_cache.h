// Internal to the CUDA backend: the per-sequence state in device memory. K and V for the attention
// layers a device holds, and for hybrid models (qwen35) each DeltaNet layer's recurrent state per
// sequence (conv inputs and S, fp32) with an equal-sized checkpoint copy.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_context.h"
#include "backend/kv_cache.h"
#include "model/arch_spec.h"

namespace tandem {

// K and V: [attention layer][slot][kv head][head_dim] of f16 or f32, or for q8_0 each slot's
// n_head_kv·head_dim values as blocks of 32 (34 bytes each), as the CPU cache stores them.
// Recurrent state per DeltaNet layer: conv [n_seq_max][K-1][conv_dim] and S [n_seq_max][Hv][dk][dv]
// (the layouts of kernels/delta_net.h, a sequence's slot being its id).
class cuda_kv_cache final : public kv_cache {
 public:
  // Holds layers [layer_begin, layer_end): a device of a layer split keeps only its own.
  cuda_kv_cache(const kv_cache_config& cfg, const hparams& hp, const cuda_backend_api* owner, const cuda_context* ctx,
                uint32_t layer_begin, uint32_t layer_end);
  static uint64_t row_bytes_of(ggml_type t, uint64_t elems) {
    if (t == ggml_type::q8_0) return elems / 32 * 34;
    return elems * (t == ggml_type::f16 ? 2 : 4);
  }
  // The DeltaNet layers of [layer_begin, layer_end) as the base class counts them.
  static recurrent_layout recurrent_of(const hparams& hp, uint32_t layer_begin, uint32_t layer_end);

  status init();
  uint64_t bytes() const override;
  // Layer il's storage (il within the range; K/V of an attention layer, state of a DeltaNet one).
  void* k_layer(uint32_t il) const { return k_.get<uint8_t>() + index_of(il) * layer_bytes_; }
  void* v_layer(uint32_t il) const { return v_.get<uint8_t>() + index_of(il) * layer_bytes_; }
  float* conv_state(uint32_t il) const;
  float* ssm_state(uint32_t il) const;
  const cuda_backend_api* owner() const { return owner_; }
  // Where the storage starts (graph keys: an unchanged address means unchanged buffers).
  const void* k_base() const { return k_.get(); }
  const void* v_base() const { return v_.get(); }
  const void* state_base() const { return state_.get(); }

 protected:
  status save_state(int32_t seq) override { return copy_state(seq, true); }
  status restore_state(int32_t seq) override { return copy_state(seq, false); }

 private:
  uint64_t index_of(uint32_t il) const { return index_[il - layer_begin_]; }
  // Copies sequence seq's slice of every DeltaNet layer's state to the checkpoint (save) or back,
  // on the backend's stream, and waits for it.
  status copy_state(int32_t seq, bool save);

  const cuda_backend_api* owner_;
  const cuda_context* ctx_;
  uint64_t layer_bytes_;
  uint32_t layer_begin_;
  uint32_t n_attn_ = 0, n_dn_ = 0;
  std::vector<uint32_t> index_;  // per layer of the range: its index among the layers of its kind
  device_buffer k_, v_;
  // [conv: n_dn × n_seq_max × conv_floats][S: n_dn × n_seq_max × ssm_floats], and its checkpoint.
  device_buffer state_, checkpoint_;
};

}  // namespace tandem
