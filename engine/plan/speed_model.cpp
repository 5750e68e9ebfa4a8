// The speed model: each device's bytes and FLOPs per token under the plan, the bytes the split
// sends between devices, and the H200 calibration that turns spec ceilings into expected rates.
#include "plan/speed_model.h"

#include <algorithm>
#include <cmath>

#include "core/exchange_layout.h"
#include "plan/active_weights.h"

namespace tandem {
namespace {

// What part of each of its layers a device computes. A tensor split cuts every layer: the device
// holds its share of the layer matrices' bytes (read from the plan's placements, so uneven block
// cuts count as they fall), of the KV heads, and of the DeltaNet key heads, which its value heads,
// their conv channels, state and rule follow. Otherwise a device computes whole layers.
struct share_fractions {
  double weights = 1, kv_heads = 1, dn_heads = 1;
};

share_fractions fractions_of(const model_desc& desc, const memory_plan& p, size_t device) {
  share_fractions f;
  if (p.split != split_mode::tensor) return f;
  const device_share& s = p.shares[device];
  const auto& hp = desc.hp;
  const delta_net_shape dn = delta_net_of(hp);
  f.kv_heads = hp.n_head_kv ? double(s.kv_head_end - s.kv_head_begin) / hp.n_head_kv : 0;
  f.dn_heads = dn.n_k_heads ? double(s.dn_head_end - s.dn_head_begin) / dn.n_k_heads : 0;
  // Layer matrices only: the embeddings and the head stay whole on the main device, the 1-D
  // norms are replicas. The DeltaNet conv kernel (2-D, cut with qkv's channels) counts too; at
  // 160 KiB a layer it does not move the fraction.
  double mine = 0, all = 0;
  for (const tensor_placement& t : p.tensors) {
    if (t.tensor == desc.token_embd || t.tensor == desc.output || t.tensor->n_dims < 2) continue;
    all += double(t.file_bytes);
    if (t.device == int(device)) mine += double(t.file_bytes);
  }
  f.weights = all > 0 ? mine / all : 0;
  return f;
}

// Bytes per token that cross a link on the critical path. Tensor split: two sums per layer (after
// the mixer, after the FFN) and the embeddings' broadcast, in which every device pushes its whole
// x into every peer's inbox (one-shot, kernels/collective.h); messages up to k_exchange_words
// floats (decode) go as 8-byte flagged words, larger ones (prefill chunks of n_batch tokens) as
// floats; all devices send at once. Layer split: each stage boundary hands the residual stream
// on as floats (cudaMemcpyPeerAsync), one boundary after the other.
struct link_traffic {
  double decode = 0, prefill = 0;
};

link_traffic link_traffic_of(const model_desc& desc, const memory_plan& p, int n_used) {
  if (n_used < 2) return {};
  const double E = desc.hp.n_embd, peers = n_used - 1;
  if (p.split == split_mode::layer) return {peers * E * sizeof(float), peers * E * sizeof(float)};
  auto element = [](double floats) { return floats <= double(k_exchange_words) ? sizeof(uint64_t) : sizeof(float); };
  const double messages = 2.0 * desc.hp.n_layer + 1;
  return {messages * peers * E * element(E), messages * peers * E * element(E * p.n_batch)};
}

// The plan's used devices run one after another (layer split) or side by side (tensor split),
// then wait for the link.
speed_figures figures_at(const speed_estimate& e, const memory_plan& p, double link) {
  speed_figures f;
  f.link_bytes_per_s = e.n_used > 1 ? link : 0;
  auto combine = [&](auto seconds_of) {
    double t = 0;
    for (size_t d = 0; d < e.devices.size(); ++d) {
      if (!p.shares[d].used()) continue;
      const double s = seconds_of(*e.gpus[d], e.devices[d]);
      t = p.split == split_mode::tensor ? std::max(t, s) : t + s;
    }
    return t;
  };
  const double decode_s = combine([&](const gpu_model& g, const device_cost& c) {
    return c.decode_bytes() / (g.bandwidth * e.calibration.decode);
  });
  f.decode_tok_s = 1 / (decode_s + (f.link_bytes_per_s > 0 ? e.decode_link_bytes / link : 0));
  for (size_t i = 0; i < k_prefill_lengths.size(); ++i) {
    const double prefill_s = combine([&](const gpu_model& g, const device_cost& c) {
      return c.prefill_flops[i] / (g.fp16_flops * e.calibration.prefill[i]);
    });
    f.prefill_tok_s[i] = 1 / (prefill_s + (f.link_bytes_per_s > 0 ? e.prefill_link_bytes / link : 0));
  }
  return f;
}

}  // namespace

// Measured on one H200 (the nvidia-h200 machine, CUDA 13.0, tree of 5181b13, 2026-12-01;
// docs/PERFORMANCE.md): the qwen3.5-27b preset at Q6_K (20.56 GiB), f16 KV, `tandem-model bench
// -p 2048,16384 -n 128`: tg128 91.47 tok/s, pp2048 6836.4 tok/s, pp16384 5387.9 tok/s. Each is
// that model's own per-token cost as device_token_cost counts it (decode 21.336e9 bytes of
// weights, state and K/V; prefill 51.949e9 / 54.767e9 FLOPs at 2048 / 16384) times the rate, over
// the H200's spec ceilings (4.8 TB/s; 989 TFLOP/s dense fp16): 91.47 · 21.336e9 / 4.8e12 and so
// on. Fractions of spec rather than of bench's measured copy / GEMM ceilings, so that another
// GPU's data sheet is all the model needs. A change to what device_token_cost counts must
// recompute them (speed_model_test checks that the H200 gives its measurement back).
speed_calibration h200_calibration() {
  speed_calibration c;
  c.decode = 0.40658;
  c.prefill = {0.35909, 0.29836};
  c.source = "one H200 (qwen3.5-27b Q6_K, 2026-12-01)";
  return c;
}

device_cost device_token_cost(const model_desc& desc, const memory_plan& p, size_t device) {
  device_cost c;
  const device_share& s = p.shares[device];
  const auto& hp = desc.hp;
  const share_fractions f = fractions_of(desc, p, device);
  const active_weights layers = active_per_token(desc, s.layer_begin, s.layer_end, false);
  c.weight_bytes = uint64_t(std::llround(f.weights * double(layers.bytes)));
  c.params = f.weights * double(layers.params);
  if (s.output && desc.output) {
    c.weight_bytes += desc.output->n_bytes;
    c.params += double(desc.output->n_elements);
  }
  uint32_t n_attention = 0, n_delta_net = 0;
  for (uint32_t il = s.layer_begin; il < s.layer_end; ++il)
    ++(hp.kind(il) == layer_kind::attention ? n_attention : n_delta_net);
  // As the CUDA backend and bench count a decode token: every DeltaNet layer reads and writes the
  // sequence's conv inputs and S (fp32); every attention layer reads K and V of each key so far.
  const delta_net_shape dn = delta_net_of(hp);
  const double state_floats = double(dn.conv_state_floats() + dn.ssm_state_floats());
  c.state_bytes = uint64_t(std::llround(f.dn_heads * 2.0 * n_delta_net * state_floats * sizeof(float)));
  const double kv_row = double(row_bytes(p.kv_type, hp.head_dim).value_or(0));
  c.kv_bytes = f.kv_heads * n_attention * 2.0 * hp.n_head_kv * kv_row * ((k_decode_tokens + 1) / 2.0);
  // bench's prefill_flops at depth 0: 2 per matrix weight; causal attention, 4·head_dim per key
  // and query head, (n + 1) / 2 keys on average; the delta rule, about 8 per state element (a
  // decay, Sᵀk, the update and Sᵀq).
  for (size_t i = 0; i < k_prefill_lengths.size(); ++i) {
    const double keys = (k_prefill_lengths[i] + 1) / 2.0;
    c.prefill_flops[i] = 2.0 * c.params + f.kv_heads * 4.0 * n_attention * double(hp.n_head) * hp.head_dim * keys +
                         f.dn_heads * 8.0 * n_delta_net * double(dn.ssm_state_floats());
  }
  return c;
}

result<speed_estimate> estimate_speed(const model_desc& desc, const memory_plan& plan,
                                      const std::vector<const gpu_model*>& gpus, const speed_calibration& cal) {
  if (gpus.size() != plan.devices.size())
    return make_error("speed model: ", gpus.size(), " GPU models for ", plan.devices.size(), " devices");
  speed_estimate e;
  e.gpus = gpus;
  e.calibration = cal;
  double peer = 0, host = 0;
  for (size_t d = 0; d < plan.devices.size(); ++d) {
    e.devices.push_back(device_token_cost(desc, plan, d));
    if (!plan.shares[d].used()) continue;
    if (!gpus[d]) return make_error("speed model: device ", d, " (", plan.devices[d].name, ") is not a GPU model");
    ++e.n_used;
    peer = peer > 0 ? std::min(peer, gpus[d]->link_bytes_per_s) : gpus[d]->link_bytes_per_s;
    host = host > 0 ? std::min(host, gpus[d]->host_link_bytes_per_s) : gpus[d]->host_link_bytes_per_s;
  }
  if (e.n_used == 0) return make_error("speed model: the plan uses no device");
  const link_traffic t = link_traffic_of(desc, plan, e.n_used);
  e.decode_link_bytes = t.decode;
  e.prefill_link_bytes = t.prefill;
  e.peer = figures_at(e, plan, peer);
  e.host = figures_at(e, plan, host);
  return e;
}

}  // namespace tandem
