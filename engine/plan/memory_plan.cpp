// The plan proper: option checks, the main device, ratios (given, or balancing time subject to
// memory), each device's share of layers / KV heads / DeltaNet key heads / FFN columns, and the
// verdict.
#include "plan/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "plan/plan_parse.h"

namespace tandem {
namespace {

status check_options(const model_desc& desc, const plan_options& o) {
  if (!desc.arch || !desc.token_embd || !desc.output || !desc.output_norm || desc.layers.size() != desc.hp.n_layer)
    return make_error("plan: the model description is not bound");
  if (desc.hp.n_head_kv == 0 || desc.hp.n_head % desc.hp.n_head_kv != 0)
    return make_error("plan: ", desc.hp.n_head, " query heads do not divide into ", desc.hp.n_head_kv, " KV heads");
  if (auto st = check_hybrid_hparams(*desc.arch, desc.hp); !st.ok()) return make_error("plan: ", st.message());
  if (auto st = check_moe_hparams(*desc.arch, desc.hp); !st.ok()) return make_error("plan: ", st.message());
  // Experts are whole per layer: a layer split carries them, a tensor split would have to cut
  // them (by expert or by columns), which no backend does yet.
  if (desc.hp.moe() && o.split == split_mode::tensor && o.devices.size() > 1)
    return make_error("plan: a tensor split of ", desc.arch->name,
                      " (mixture of experts) is not supported yet; use split layer or none");
  if (o.devices.empty()) return make_error("plan: no devices given");
  for (size_t i = 0; i < o.devices.size(); ++i)
    if (o.devices[i].total_bytes == 0) return make_error("plan: device ", i, " (", o.devices[i].name, ") has no memory");
  if (o.n_seqs == 0) return make_error("plan: the number of sequences must be positive");
  if (o.n_batch == 0 || o.n_batch > 65535)
    return make_error("plan: the batch size must be 1..65535 tokens (the CUDA backend's limit), not ", o.n_batch);
  if (o.n_logits > o.n_batch)
    return make_error("plan: ", o.n_logits, " logit rows per batch exceed the batch of ", o.n_batch, " tokens");
  if (o.block_size == 0) return make_error("plan: the KV block size must be positive");
  if (o.kv_type != ggml_type::f16 && o.kv_type != ggml_type::f32 && o.kv_type != ggml_type::q8_0)
    return make_error("plan: KV type ", type_name(o.kv_type), " is not supported (use f16, f32 or q8_0)");
  if (o.kv_type == ggml_type::q8_0 && desc.hp.head_dim % 32 != 0)
    return make_error("plan: a q8_0 KV cache needs the head size (", desc.hp.head_dim, ") to be a multiple of 32");
  if (o.main_device >= static_cast<int>(o.devices.size()) || o.main_device < -1)
    return make_error("plan: main device ", o.main_device, " is not in the list of ", o.devices.size(), " device",
                      o.devices.size() == 1 ? "" : "s");
  if (!o.ratios.empty()) {
    if (o.split == split_mode::none) return make_error("plan: ratios apply to layer or tensor split, not split none");
    if (o.ratios.size() != o.devices.size())
      return make_error("plan: ", o.ratios.size(), " ratios given for ", o.devices.size(), " devices");
    for (double r : o.ratios)
      if (!(r > 0) || !std::isfinite(r)) return make_error("plan: ratio ", r, " must be a positive number");
  }
  for (const auto& d : o.devices)
    if (!(d.speed > 0)) return make_error("plan: device ", d.name, " has a non-positive speed");
  return {};
}

uint64_t capacity_of(const device_spec& d, const runtime_constants& rt) {
  uint64_t c = d.total_bytes;
  if (d.cap_bytes) c = std::min(c, d.cap_bytes);
  return std::min(c, d.free_bytes + (d.context_in_free ? rt.cuda_context_bytes : 0));
}

// FFN columns are cut at multiples of every ffn_down type's block (its rows are those columns).
uint64_t ffn_unit(const model_desc& desc) {
  uint64_t unit = 1;
  for (const auto& l : desc.layers)
    if (l.ffn_down) unit = std::lcm(unit, uint64_t{type_info(l.ffn_down->type).block_size});
  return unit;
}

// DeltaNet key heads are cut at multiples of this: every cut of ssm_out's inputs (value heads of
// dv columns, in Hv/Hk strided runs) must fall on whole blocks of its type. Hk when no cut does.
uint32_t delta_net_unit(const model_desc& desc) {
  const delta_net_shape dn = delta_net_of(desc.hp);
  if (dn.n_k_heads == 0) return 1;
  uint64_t unit = 1;
  for (uint32_t il = 0; il < desc.hp.n_layer; ++il) {
    const gguf_tensor* out = desc.layers[il].dn_out;
    if (desc.hp.kind(il) != layer_kind::delta_net || !out) continue;
    const uint64_t block = type_info(out->type).block_size;
    unit = std::lcm(unit, block / std::gcd(block, uint64_t{dn.v_dim}));
  }
  return dn.n_k_heads % unit == 0 ? uint32_t(unit) : dn.n_k_heads;
}

// Contiguous ranges of `units` by cumulative share, in device order.
std::vector<uint64_t> boundaries(uint64_t units, const std::vector<double>& shares) {
  std::vector<uint64_t> b(shares.size() + 1, 0);
  double cum = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    cum += shares[i];
    const uint64_t at = i + 1 == shares.size() ? units : std::min<uint64_t>(units, std::llround(cum * double(units)));
    b[i + 1] = std::max(b[i], at);
  }
  return b;
}

device_share full_share(const model_desc& desc, bool main) {
  device_share s;
  s.layer_end = desc.hp.n_layer;
  s.kv_head_end = desc.hp.n_head_kv;
  s.dn_head_end = delta_net_of(desc.hp).n_k_heads;
  s.ffn_end = desc.hp.n_ff;
  s.embeddings = s.output = main;
  return s;
}

std::vector<device_share> make_shares(const model_desc& desc, const plan_options& o, int main,
                                      const std::vector<double>& shares) {
  const size_t n = o.devices.size();
  std::vector<device_share> out(n);
  for (size_t d = 0; d < n; ++d) out[d].embeddings = out[d].output = int(d) == main;
  if (o.split == split_mode::none || n == 1) {
    out[main] = full_share(desc, true);
    return out;
  }
  const auto& hp = desc.hp;
  if (o.split == split_mode::layer) {
    // As the CUDA layer split runs: the first device with layers looks up the embeddings, the
    // last one holds the output head (the main device plays no part).
    const auto b = boundaries(hp.n_layer, shares);
    int first = -1, last = -1;
    for (size_t d = 0; d < n; ++d) {
      out[d] = full_share(desc, false);
      out[d].layer_begin = uint32_t(b[d]);
      out[d].layer_end = uint32_t(b[d + 1]);
      if (out[d].layer_end > out[d].layer_begin) {
        if (first < 0) first = int(d);
        last = int(d);
      }
    }
    out[first < 0 ? main : first].embeddings = true;
    out[last < 0 ? main : last].output = true;
    return out;
  }
  const auto heads = boundaries(hp.n_head_kv, shares);
  const uint64_t unit = ffn_unit(desc);
  const auto ffn = boundaries(hp.n_ff / unit, shares);
  const uint32_t dn_unit = delta_net_unit(desc);
  const auto dn = boundaries(delta_net_of(hp).n_k_heads / dn_unit, shares);
  for (size_t d = 0; d < n; ++d) {
    device_share& s = out[d];
    s.kv_head_begin = uint32_t(heads[d]);
    s.kv_head_end = uint32_t(heads[d + 1]);
    s.dn_head_begin = uint32_t(dn[d] * dn_unit);
    s.dn_head_end = uint32_t(dn[d + 1] * dn_unit);
    s.ffn_begin = ffn[d] * unit;
    s.ffn_end = ffn[d + 1] * unit;
    const bool any = s.kv_head_end > s.kv_head_begin || s.dn_head_end > s.dn_head_begin || s.ffn_end > s.ffn_begin;
    s.layer_end = any ? hp.n_layer : 0;
  }
  return out;
}

int count_used(const std::vector<device_share>& shares) {
  int n = 0;
  for (const auto& s : shares) n += s.used() ? 1 : 0;
  return n;
}

// Fills the plan's shares, usage, placements and verdict for these shares.
status evaluate(const model_desc& desc, const plan_options& o, const std::vector<double>& shares, memory_plan& p) {
  p.shares = make_shares(desc, o, p.main_device, shares);
  const int n_used = count_used(p.shares);
  p.usage.assign(o.devices.size(), {});
  p.tensors.clear();
  p.fits = true;
  p.reasons.clear();
  for (size_t d = 0; d < o.devices.size(); ++d) {
    auto u = device_footprint(desc, o, p.shares[d], n_used, &p.tensors, int(d));
    if (!u) return make_error("plan: ", u.message());
    device_usage& du = *u;
    du.capacity = capacity_of(o.devices[d], o.rt);
    du.available = du.capacity > o.margin_bytes ? du.capacity - o.margin_bytes : 0;
    du.fits = du.total <= du.available;
    du.shortfall = du.fits ? 0 : du.total - du.available;
    if (!du.fits) {
      p.fits = false;
      p.reasons.push_back(make_error(
          "device ", d, " (", o.devices[d].name, ") needs ", plan_bytes_text(du.total), " (weights ",
          plan_bytes_text(du.weights), du.experts ? ", experts " + plan_bytes_text(du.experts) : std::string(),
          ", KV cache ", plan_bytes_text(du.kv_cache),
          du.state ? ", recurrent state " + plan_bytes_text(du.state) : std::string(), ", activations ",
          plan_bytes_text(du.activations), ", workspace ", plan_bytes_text(du.workspace), ", overhead ",
          plan_bytes_text(du.overhead), ") but has ", plan_bytes_text(du.available), " available (",
          plan_bytes_text(du.capacity), " less a ", plan_bytes_text(o.margin_bytes), " margin): ",
          plan_bytes_text(du.shortfall), " short").message);
    }
    p.usage[d] = du;
  }
  return {};
}

// Shares proportional to speed, except that no device gets more than it can hold (by a linear
// estimate of its bytes against its share); what it cannot hold goes to the others.
std::vector<double> water_fill(const std::vector<double>& speed, const std::vector<double>& cap) {
  const size_t n = speed.size();
  std::vector<double> s(n, 0);
  std::vector<bool> fixed(n, false);
  double left = 1;
  for (size_t round = 0; round < n; ++round) {
    double sum = 0;
    for (size_t d = 0; d < n; ++d) sum += fixed[d] ? 0 : speed[d];
    if (sum <= 0) break;
    bool capped = false;
    const double pool = left;
    for (size_t d = 0; d < n; ++d)
      if (!fixed[d] && pool * speed[d] / sum > cap[d]) {
        fixed[d] = true;
        capped = true;
        s[d] = cap[d];
        left -= cap[d];
      }
    if (capped) continue;
    for (size_t d = 0; d < n; ++d)
      if (!fixed[d]) s[d] = left * speed[d] / sum;
    left = 0;
    break;
  }
  const double total = std::accumulate(s.begin(), s.end(), 0.0);
  if (left > 1e-9 || total <= 0) {
    // Nothing holds the whole model: share by room so the shortfall is spread, and report it.
    s = cap;
    double t = std::accumulate(s.begin(), s.end(), 0.0);
    if (t <= 0) s = speed, t = std::accumulate(s.begin(), s.end(), 0.0);
    for (double& x : s) x /= t;
    return s;
  }
  for (double& x : s) x /= total;
  return s;
}

result<std::vector<double>> default_shares(const model_desc& desc, const plan_options& o, int main) {
  const size_t n = o.devices.size();
  std::vector<double> speed(n), cap(n), var(n);
  const uint64_t per_device = device_overhead_bytes(o, int(n));
  for (size_t d = 0; d < n; ++d) {
    device_share empty;
    empty.embeddings = empty.output = int(d) == main;
    if (o.split == split_mode::layer) {  // see make_shares
      empty.embeddings = d == 0;
      empty.output = d + 1 == n;
    }
    device_share full = full_share(desc, false);
    full.embeddings = empty.embeddings, full.output = empty.output;
    auto lo = device_footprint(desc, o, empty, int(n));
    auto hi = device_footprint(desc, o, full, int(n));
    if (!lo) return make_error("plan: ", lo.message());
    if (!hi) return make_error("plan: ", hi.message());
    const double fixed = double(lo->total + (empty.used() ? 0 : per_device));
    var[d] = std::max(1.0, double(hi->total) - fixed);
    const uint64_t c = capacity_of(o.devices[d], o.rt);
    const double avail = c > o.margin_bytes ? double(c - o.margin_bytes) : 0;
    cap[d] = std::clamp((avail - fixed) / var[d], 0.0, 1.0);
    speed[d] = o.devices[d].speed;
  }
  std::vector<double> s = water_fill(speed, cap);
  // The estimate is linear but shares are whole layers or heads: move one unit at a time off a
  // device that is short onto the one with the most room, while that helps.
  const uint32_t dn_cuts = delta_net_of(desc.hp).n_k_heads / delta_net_unit(desc);
  const double unit = 1.0 / (o.split == split_mode::layer ? desc.hp.n_layer : std::max(desc.hp.n_head_kv, dn_cuts));
  memory_plan p;
  p.main_device = main;
  for (int iter = 0; iter < 64; ++iter) {
    TANDEM_TRY(evaluate(desc, o, s, p));
    if (p.fits) break;
    size_t worst = 0, roomiest = n;
    double room = 0;
    for (size_t d = 0; d < n; ++d) {
      if (p.usage[d].shortfall > p.usage[worst].shortfall) worst = d;
      const double r = (double(p.usage[d].available) - double(p.usage[d].total)) / var[d];
      if (p.usage[d].fits && r > room) room = r, roomiest = d;
    }
    if (roomiest == n || s[worst] <= 0) break;
    const double move = std::min({s[worst], double(p.usage[worst].shortfall) / var[worst] + unit, room});
    if (move <= 0) break;
    s[worst] -= move;
    s[roomiest] += move;
  }
  if (!p.fits) return s;
  // The linear estimate may leave a memory-bound device a unit short of what it holds: top up
  // each device below its speed share, one unit at a time, from the one furthest above its own,
  // while everything still fits.
  double speed_sum = 0;
  for (double v : speed) speed_sum += v;
  for (size_t d = 0; d < n; ++d) {
    for (int iter = 0; iter < 64 && s[d] + unit <= speed[d] / speed_sum + 1e-9; ++iter) {
      size_t from = n;
      double over = 0;
      for (size_t e = 0; e < n; ++e)
        if (e != d && s[e] - speed[e] / speed_sum > over + 1e-9 && s[e] >= unit) over = s[e] - speed[e] / speed_sum, from = e;
      if (from == n) break;
      std::vector<double> t = s;
      t[d] += unit, t[from] -= unit;
      memory_plan q;
      q.main_device = main;
      TANDEM_TRY(evaluate(desc, o, t, q));
      if (!q.fits) break;
      s = t;
    }
  }
  return s;
}

void add_notes(const model_desc& desc, const plan_options& o, memory_plan& p) {
  const uint32_t D = desc.hp.head_dim;
  if (D != 32 && D != 64 && D != 128 && D != 256)
    p.notes.push_back("the CUDA backend supports head sizes 32, 64, 128 and 256, not " + std::to_string(D));
  if (o.split != split_mode::none && o.devices.size() > 1)
    if (const std::string why = split_unsupported(desc.arch->name, desc.hp); !why.empty())
      p.notes.push_back(why + ": a load given these GPUs serves it on the one it fits with the most room");
  if (o.split == split_mode::none && o.devices.size() > 1)
    p.notes.push_back("split none: only device " + std::to_string(p.main_device) + " is used");
  for (size_t d = 0; d < o.devices.size(); ++d)
    if (o.split != split_mode::none && o.devices.size() > 1 && !p.shares[d].used())
      p.notes.push_back("device " + std::to_string(d) + " gets no share of the model at these ratios");
  if (o.split == split_mode::tensor)
    for (size_t d = 0; d < o.devices.size(); ++d)
      if (p.shares[d].used() && p.shares[d].kv_head_end == p.shares[d].kv_head_begin)
        p.notes.push_back("device " + std::to_string(d) + " gets FFN columns but no attention heads");
  const delta_net_shape dn = delta_net_of(desc.hp);
  if (o.split != split_mode::tensor || o.devices.size() < 2 || dn.n_k_heads == 0) return;
  const uint32_t unit = delta_net_unit(desc);
  const std::string hk = std::to_string(dn.n_k_heads);
  p.notes.push_back("DeltaNet layers are cut by key heads" +
                    (unit > 1 ? " in groups of " + std::to_string(unit) + " (whole blocks of ssm_out's inputs)" : "") +
                    ": value head h uses key head h % " + hk + ", so a device with key heads a-b computes the value "
                    "heads h with h % " + hk + " in a-b (" + std::to_string(dn.n_v_heads / dn.n_k_heads) +
                    " strided runs), with their conv channels and state; contiguous value-head ranges would repeat "
                    "every key head's q and k on each device");
  if (unit == dn.n_k_heads)
    p.notes.push_back("no cut of the DeltaNet key heads falls on whole blocks of ssm_out: one device holds them all");
  for (size_t d = 0; d < o.devices.size(); ++d)
    if (p.shares[d].used() && p.shares[d].dn_head_end == p.shares[d].dn_head_begin && unit < dn.n_k_heads)
      p.notes.push_back("device " + std::to_string(d) + " gets no DeltaNet heads");
}

}  // namespace

result<memory_plan> make_memory_plan(const model_desc& desc, const plan_options& in) {
  TANDEM_TRY(check_options(desc, in));
  plan_options o = in;
  if (o.n_ctx == 0) o.n_ctx = desc.hp.n_ctx_train;
  if (o.n_ctx == 0) return make_error("plan: the model gives no training context; set the context size");
  if (o.n_logits == 0) o.n_logits = std::min(o.n_seqs, o.n_batch);
  const size_t n = o.devices.size();
  if (n == 1) o.split = split_mode::none;

  memory_plan p;
  p.split = o.split;
  p.n_ctx = o.n_ctx;
  p.n_seqs = o.n_seqs;
  p.n_batch = o.n_batch;
  p.n_logits = o.n_logits;
  p.block_size = o.block_size;
  p.kv_type = o.kv_type;
  p.devices = o.devices;
  p.main_device = o.main_device;
  if (p.main_device < 0) {  // the device with the most room holds the head and takes the overflow
    p.main_device = 0;
    for (size_t d = 1; d < n; ++d)
      if (capacity_of(o.devices[d], o.rt) > capacity_of(o.devices[p.main_device], o.rt)) p.main_device = int(d);
  }
  p.model_tensor_bytes = model_tensor_bytes(desc);

  std::vector<double> shares(n, 0);
  if (o.split == split_mode::none) {
    shares[p.main_device] = 1;
  } else if (!o.ratios.empty()) {
    const double sum = std::accumulate(o.ratios.begin(), o.ratios.end(), 0.0);
    for (size_t d = 0; d < n; ++d) shares[d] = o.ratios[d] / sum;
  } else {
    auto s = default_shares(desc, o, p.main_device);
    if (!s) return s.err();
    shares = *s;
    p.default_ratios = true;
  }
  p.ratios = shares;
  TANDEM_TRY(evaluate(desc, o, shares, p));
  add_notes(desc, o, p);
  return p;
}

}  // namespace tandem
