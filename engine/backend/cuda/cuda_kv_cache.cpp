// The CUDA backend's sequence state in device memory (cuda_kv_cache.h).
#include "backend/cuda/cuda_kv_cache.h"

#include "kernels/cuda_check.h"

namespace tandem {

recurrent_layout cuda_kv_cache::recurrent_of(const hparams& hp, uint32_t layer_begin, uint32_t layer_end) {
  recurrent_layout r;
  if (!hp.hybrid()) return r;
  for (uint32_t il = layer_begin; il < layer_end; ++il) r.n_layers += hp.kind(il) == layer_kind::delta_net;
  const delta_net_shape dn = delta_net_of(hp);
  r.conv_floats = dn.conv_state_floats();
  r.ssm_floats = dn.ssm_state_floats();
  return r;
}

cuda_kv_cache::cuda_kv_cache(const kv_cache_config& cfg, const hparams& hp, const cuda_backend_api* owner,
                             const cuda_context* ctx, uint32_t layer_begin, uint32_t layer_end)
    : kv_cache(cfg, recurrent_of(hp, layer_begin, layer_end)),
      owner_(owner),
      ctx_(ctx),
      layer_bytes_(row_bytes_of(cfg.type, uint64_t{hp.n_head_kv} * hp.head_dim) * n_slots()),
      layer_begin_(layer_begin) {
  for (uint32_t il = layer_begin; il < layer_end; ++il)
    index_.push_back(hp.kind(il) == layer_kind::attention ? n_attn_++ : n_dn_++);
}

status cuda_kv_cache::init() {
  TANDEM_TRY(k_.alloc(layer_bytes_ * n_attn_));
  TANDEM_TRY(v_.alloc(layer_bytes_ * n_attn_));
  if (!has_recurrent()) return {};
  const size_t state_bytes = size_t(config().n_seq_max) * recurrent().floats_per_seq() * sizeof(float);
  TANDEM_TRY(state_.alloc(state_bytes));
  TANDEM_TRY(checkpoint_.alloc(state_bytes));
  // A sequence's state is read only after its position 0 wrote it; zeros keep stray reads harmless.
  TANDEM_CUDA_TRY(cudaMemsetAsync(state_.get(), 0, state_bytes, ctx_->stream()));
  TANDEM_CUDA_TRY(cudaMemsetAsync(checkpoint_.get(), 0, state_bytes, ctx_->stream()));
  TANDEM_CUDA_TRY(cudaStreamSynchronize(ctx_->stream()));
  return {};
}

uint64_t cuda_kv_cache::bytes() const { return 2 * layer_bytes_ * n_attn_ + recurrent_bytes(); }

float* cuda_kv_cache::conv_state(uint32_t il) const {
  const uint64_t per_layer = uint64_t{config().n_seq_max} * recurrent().conv_floats;
  return state_.get<float>() + index_of(il) * per_layer;
}

float* cuda_kv_cache::ssm_state(uint32_t il) const {
  const uint64_t n_seq = config().n_seq_max;
  const uint64_t conv_all = uint64_t{n_dn_} * n_seq * recurrent().conv_floats;
  return state_.get<float>() + conv_all + index_of(il) * n_seq * recurrent().ssm_floats;
}

status cuda_kv_cache::copy_state(int32_t seq, bool save) {
  if (!has_recurrent()) return make_error("this cache keeps no recurrent state");
  TANDEM_TRY(ctx_->activate());
  const cudaStream_t s = ctx_->stream();
  const uint64_t n_seq = config().n_seq_max, cf = recurrent().conv_floats, sf = recurrent().ssm_floats;
  float* live = state_.get<float>();
  float* saved = checkpoint_.get<float>();
  // Region by region (conv, S), layer by layer: the sequence's slice of each.
  const uint64_t conv_all = uint64_t{n_dn_} * n_seq * cf;
  for (uint32_t l = 0; l < n_dn_; ++l) {
    const uint64_t offs[2] = {(l * n_seq + uint64_t(seq)) * cf, conv_all + (l * n_seq + uint64_t(seq)) * sf};
    const uint64_t lens[2] = {cf, sf};
    for (int r = 0; r < 2; ++r) {
      float* dst = (save ? saved : live) + offs[r];
      const float* src = (save ? live : saved) + offs[r];
      TANDEM_CUDA_TRY(cudaMemcpyAsync(dst, src, lens[r] * sizeof(float), cudaMemcpyDeviceToDevice, s));
    }
  }
  TANDEM_CUDA_TRY(cudaStreamSynchronize(s));
  return {};
}

}  // namespace tandem
