// The hybrid (qwen35) parts of the CUDA forward pass: the Gated DeltaNet block with its per-sequence
// recurrent state, the output gate of the full-attention layers, and the state bookkeeping around
// a step. The math is backend/cpu/delta_net_ops.h's, through the kernels of kernels/delta_net.h.
#include <algorithm>
#include <cstdlib>
#include <set>
#include <string_view>

#include "backend/cuda/cuda_backend_impl.h"
#include "kernels/cuda_check.h"
#include "kernels/delta_net.h"
#include "kernels/layer_ops.h"
#include "kernels/matvec.h"

namespace tandem {
namespace {

constexpr float k_l2_eps = 1e-6f;  // Hugging Face's l2norm on q and k

// Steps whose longest run has at least this many tokens take the chunked rule: measured on an
// H200 (big.dn_rule_chunked_vs_recurrent, 16 k-heads, 32 v-heads of 128), one run of 64 tokens
// took it 0.82x the recurrent kernel's speed, 128 tokens 1.05x, 2048 1.41x.
constexpr int k_dn_chunked_min_tokens = 128;

// TANDEM_DN_CHUNKED=0 keeps the recurrent rule for every step (to compare, or to rule the chunked
// one out); read once.
bool dn_chunked_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("TANDEM_DN_CHUNKED");
    return !(e && std::string_view(e) == "0");
  }();
  return on;
}

}  // namespace

status cuda_backend::ensure_hybrid_scratch(int n) {
  if (!hybrid()) return {};
  const delta_net_shape dn = delta_net_of(hp_);
  const size_t T = size_t(n), f = sizeof(float), QD = size_t(hp_.n_head) * hp_.head_dim;
  const size_t C = dn.conv_dim(), VD = dn.value_dim(), Hv = dn.n_v_heads;
  TANDEM_TRY(qg_.alloc(T * 2 * QD * f));
  TANDEM_TRY(attn_gate_.alloc(T * QD * f));
  for (device_buffer* b : {&dn_qkv_, &dn_u_}) TANDEM_TRY(b->alloc(T * C * f));
  for (device_buffer* b : {&dn_z_, &dn_o_, &dn_y_}) TANDEM_TRY(b->alloc(T * VD * f));
  TANDEM_TRY(dn_b_.alloc(T * 2 * Hv * f));  // b, or b and a side by side (dn_ba)
  TANDEM_TRY(dn_a_.alloc(T * Hv * f));
  if (dn_chunked_enabled() && n >= k_dn_chunked_min_tokens)
    TANDEM_TRY(dn_work_.alloc(dn_rule_chunked_work_bytes(n, int(dn.n_k_heads), int(Hv), int(dn.k_dim), int(dn.v_dim))));
  return {};
}

// x += ssm_out · gated_norm(delta_rule(conv(W_qkv xn)), z), xn = RMSNorm(x): the DeltaNet mixer
// over each sequence's run of tokens, its state read and written once per run.
status cuda_backend::delta_net_block(uint32_t il, cuda_kv_cache& cache) {
  const auto& L = w_.layers[il];
  const delta_net_shape dn = delta_net_of(hp_);
  const cudaStream_t s = ctx_->stream();
  const int T = plan_.n_tok, E = int(hp_.n_embd), C = int(dn.conv_dim()), Hv = int(dn.n_v_heads);
  float *x = x_.get<float>(), *xn = xn_.get<float>(), *qkv = dn_qkv_.get<float>(), *z = dn_z_.get<float>(),
        *b = dn_b_.get<float>(), *a_sep = dn_a_.get<float>();
  // b and a as one job when their rows lie back to back: gate inputs [T][b(Hv), a(Hv)].
  const bool ba = L.dn_ba.n_out == 2 * Hv;
  float* a = ba ? b + Hv : a_sep;
  const int64_t gate_stride = ba ? 2 * Hv : Hv;
  // Decode: the projections of types other than qkv's (z's and the gate inputs', say) run on the
  // side stream beside qkv's and the conv; the rule joins them.
  bool forked = false;
  if (matvec_ready({&L.dn_qkv, &L.dn_gate, &L.dn_beta, &L.dn_alpha}, T)) {
    // The launches read the one int8 copy of xn the norm writes.
    if (norm_folded_ != int64_t(il))
      TANDEM_CUDA_TRY(launch_rms_norm_q8(x, L.attn_norm, xn, T, E, hp_.rms_eps, matvec_work_.get(), s));
    TANDEM_TRY(mark("DeltaNet norm"));
    if (ba) {
      TANDEM_TRY(matvec_quantized_beside({{&L.dn_qkv, qkv}, {&L.dn_gate, z}, {&L.dn_ba, b}}, xn, T, forked));
    } else {
      TANDEM_TRY(matvec_quantized_beside({{&L.dn_qkv, qkv}, {&L.dn_gate, z}, {&L.dn_beta, b}, {&L.dn_alpha, a}}, xn, T,
                                         forked));
    }
  } else {
    TANDEM_CUDA_TRY(launch_rms_norm(x, L.attn_norm, xn, T, E, hp_.rms_eps, s));
    TANDEM_TRY(mark("DeltaNet norm"));
    if (ba) {
      TANDEM_TRY(matmul_fused({{&L.dn_qkv, qkv}, {&L.dn_gate, z}, {&L.dn_ba, b}}, xn, T, false));
    } else {
      TANDEM_TRY(matmul_fused({{&L.dn_qkv, qkv}, {&L.dn_gate, z}, {&L.dn_beta, b}}, xn, T, false));
      TANDEM_TRY(matmul_fused({{&L.dn_alpha, a}}, xn, T, false));
    }
  }
  TANDEM_TRY(mark("DeltaNet qkv z b a"));

  const dn_runs runs{dev_ints(plan_.off_dn_runs), plan_.n_dn_runs, plan_.dn_max_tokens};
  float* u = dn_u_.get<float>();
  TANDEM_CUDA_TRY(launch_dn_conv(qkv, C, L.dn_conv, C, int(dn.kernel), cache.conv_state(il), runs, u, s));
  TANDEM_TRY(mark("DeltaNet conv"));

  dn_rule_args r;
  r.q = u, r.k = u + dn.key_dim(), r.qk_stride = C;
  r.v = u + 2 * dn.key_dim(), r.v_stride = C;
  r.alpha = a, r.beta = b, r.a_decay = L.dn_a, r.dt_bias = L.dn_dt_bias;
  r.gate_stride = gate_stride;
  r.l2_eps = k_l2_eps;
  r.Hk = int(dn.n_k_heads), r.Hv = Hv, r.dk = int(dn.k_dim), r.dv = int(dn.v_dim);
  r.S = cache.ssm_state(il);
  r.out = dn_o_.get<float>();
  if (forked) TANDEM_TRY(ctx_->join_side());
  if (dn_chunked_enabled() && plan_.dn_max_tokens >= k_dn_chunked_min_tokens)
    TANDEM_CUDA_TRY(launch_dn_rule_chunked(r, runs, T, dn_work_.get(), dn_work_.size(), s));
  else
    TANDEM_CUDA_TRY(launch_dn_rule(r, runs, s));
  TANDEM_TRY(mark("DeltaNet gates, l2 norm, rule"));
  float* y = dn_y_.get<float>();
  // Decode: the gated norm also writes y's int8 copy, which the out projection reads (one launch fewer).
  const bool yq = matvec_ready({&L.dn_out}, T) && dn.v_dim % 32 == 0 && L.dn_out.n_in == int64_t(Hv) * dn.v_dim;
  const matvec_qx yx = matvec_x_parts(matvec_work_.get(), L.dn_out.n_in, T);
  TANDEM_CUDA_TRY(launch_rms_norm_gated(r.out, L.dn_norm, z, y, int64_t(T) * Hv, int(dn.v_dim), hp_.rms_eps, s,
                                        yq ? yx.q : nullptr, yq ? yx.ds : nullptr));
  TANDEM_TRY(mark("DeltaNet gated norm"));
  if (yq)
    TANDEM_TRY(matvec_quantized({{&L.dn_out, x}}, y, T, adds_residual()));  // x += ssm_out·y
  else
    TANDEM_TRY(matmul_fused({{&L.dn_out, x}}, y, T, adds_residual()));
  return mark("DeltaNet out");
}

status cuda_backend::split_q_gate(int n_tok) {
  TANDEM_CUDA_TRY(launch_split_q_gate(qg_.get<float>(), n_tok, int(hp_.n_head), int(hp_.head_dim), q_.get<float>(),
                                      attn_gate_.get<float>(), ctx_->stream()));
  return {};
}

status cuda_backend::gate_attention(int n_tok, bool quantize) {
  const int64_t n = int64_t(n_tok) * hp_.n_head * hp_.head_dim;
  const matvec_qx q = matvec_x_parts(matvec_work_.get(), n / std::max(n_tok, 1), n_tok);
  TANDEM_CUDA_TRY(launch_sigmoid_mul(att_.get<float>(), attn_gate_.get<float>(), n, ctx_->stream(),
                                     quantize ? q.q : nullptr, quantize ? q.ds : nullptr));
  return mark("attention gate");
}

void cuda_backend::begin_states(const batch& b, cuda_kv_cache& cache) {
  state_cache_ = nullptr;
  state_seqs_.clear();
  if (!cache.has_recurrent()) return;
  state_cache_ = &cache;
  const std::set<int32_t> seqs(b.seq_ids.begin(), b.seq_ids.end());
  state_seqs_.assign(seqs.begin(), seqs.end());
  for (int32_t seq : state_seqs_) cache.set_state_length(seq, kv_cache::k_state_unknown);
}

status cuda_backend::finish_states() {
  if (!state_cache_) return {};
  for (int32_t seq : state_seqs_) state_cache_->set_state_length(seq, state_cache_->length(seq));
  state_cache_ = nullptr;
  state_seqs_.clear();
  return {};
}

}  // namespace tandem
