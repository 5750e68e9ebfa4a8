// Text and JSON renderings of a memory plan and of its speed estimate.
#include "plan/plan_report.h"

#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "plan/active_weights.h"
#include "plan/plan_parse.h"

namespace tandem {
namespace {

using json = nlohmann::ordered_json;

std::string_view kind_name(placement_kind k) {
  switch (k) {
    case placement_kind::whole: return "whole";
    case placement_kind::replica: return "replica";
    case placement_kind::rows: return "rows";
    case placement_kind::columns: return "columns";
  }
  return "?";
}

std::string range_text(uint64_t b, uint64_t e) {
  return e > b + 1 ? std::to_string(b) + "-" + std::to_string(e - 1) : std::to_string(b);
}

std::string runs_text(const std::vector<std::pair<uint64_t, uint64_t>>& runs) {
  std::string out;
  for (const auto& [b, e] : runs) out += (out.empty() ? "" : ", ") + range_text(b, e);
  return out;
}

// "layers 0-63, KV heads 0-2 (3 of 8), FFN columns 0-9215 (9216 of 25600), embeddings, output head"
std::string share_text(const model_desc& desc, const memory_plan& p, const device_share& s) {
  if (!s.used()) return "nothing";
  const auto& hp = desc.hp;
  std::string out;
  auto add = [&out](const std::string& part) {
    if (!out.empty()) out += ", ";
    out += part;
  };
  if (s.layer_end > s.layer_begin) {
    add("layers " + range_text(s.layer_begin, s.layer_end) + " (" + std::to_string(s.layer_end - s.layer_begin) +
        " of " + std::to_string(hp.n_layer) + ")");
    if (p.split == split_mode::tensor) {
      const uint32_t nh = s.kv_head_end - s.kv_head_begin;
      add(nh ? "KV heads " + range_text(s.kv_head_begin, s.kv_head_end) + " (" + std::to_string(nh) + " of " +
                   std::to_string(hp.n_head_kv) + ")"
             : "no KV heads");
      const delta_net_shape dn = delta_net_of(hp);
      if (dn.n_k_heads) {
        const uint32_t nk = s.dn_head_end - s.dn_head_begin, nv = nk * (dn.n_v_heads / dn.n_k_heads);
        add(nk ? "DeltaNet key heads " + range_text(s.dn_head_begin, s.dn_head_end) + " (" + std::to_string(nk) +
                     " of " + std::to_string(dn.n_k_heads) + ") with value heads " +
                     runs_text(delta_net_value_runs(hp, s)) + " (" + std::to_string(nv) + " of " +
                     std::to_string(dn.n_v_heads) + ")"
               : "no DeltaNet heads");
      }
      const uint64_t nf = s.ffn_end - s.ffn_begin;
      add(nf ? "FFN columns " + range_text(s.ffn_begin, s.ffn_end) + " (" + std::to_string(nf) + " of " +
                   std::to_string(hp.n_ff) + ")"
             : "no FFN columns");
    }
  }
  if (s.embeddings) add("embeddings");
  if (s.output) add("output head and logits");
  return out;
}

std::string ratio_text(const std::vector<double>& r) {
  double lo = 0;
  for (double x : r)
    if (x > 0 && (lo == 0 || x < lo)) lo = x;
  std::string out;
  char buf[32];
  for (size_t i = 0; i < r.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.3g", lo > 0 ? r[i] / lo : 0.0);
    if (i) out += ':';
    out += buf;
  }
  return out;
}

// "1,152" from a thousand up, "33.9" below.
std::string rate_text(double v) {
  char buf[32];
  if (!(v >= 1000)) {
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.0f", v);
  std::string digits = buf, out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string figures_text(const speed_figures& f) {
  std::string out = "decode " + rate_text(f.decode_tok_s) + " tok/s";
  for (size_t i = 0; i < k_prefill_lengths.size(); ++i)
    out += ", pp" + std::to_string(k_prefill_lengths[i]) + " " + rate_text(f.prefill_tok_s[i]) + " tok/s";
  return out;
}

// The closing section: headline figures (also through host memory for a tensor split, whose
// exchange is the part that link decides), then what they assume.
std::string speed_text(const memory_plan& p, const speed_estimate& e) {
  std::ostringstream os;
  char line[640];
  os << "\nexpected speed (a model, not a measurement: H200-calibrated fractions of spec bandwidth / fp16 rate):\n";
  if (e.n_used < 2) {
    os << "  " << figures_text(e.peer) << "\n";
  } else {
    std::snprintf(line, sizeof line, "  %s (peer access, link %.1f GB/s)\n", figures_text(e.peer).c_str(),
                  e.peer.link_bytes_per_s / 1e9);
    os << line;
    if (p.split == split_mode::tensor) {
      std::snprintf(line, sizeof line, "  %s (through host memory, no peer access: %.1f GB/s)\n",
                    figures_text(e.host).c_str(), e.host.link_bytes_per_s / 1e9);
      os << line;
    }
  }
  const auto& c = e.calibration;
  std::snprintf(line, sizeof line,
                "  assumes each device reaches %.1f%% of its spec bandwidth (decode: batch 1, tg%u) and "
                "%.1f%% / %.1f%% of its spec fp16 rate (pp%u / pp%u), as the kernels do on %s",
                100 * c.decode, k_decode_tokens, 100 * c.prefill[0], 100 * c.prefill[1], k_prefill_lengths[0],
                k_prefill_lengths[1], std::string(c.source).c_str());
  os << line;
  if (e.n_used > 1) {
    std::snprintf(line, sizeof line, "; %s per decode token and %s per prompt token cross the link, "
                  "latency and overlap not counted", plan_bytes_text(uint64_t(e.decode_link_bytes)).c_str(),
                  plan_bytes_text(uint64_t(e.prefill_link_bytes)).c_str());
    os << line;
  }
  os << "\n";
  return os.str();
}

json prefill_json(const std::array<double, 2>& v) {
  json j;
  for (size_t i = 0; i < k_prefill_lengths.size(); ++i) j[std::to_string(k_prefill_lengths[i])] = v[i];
  return j;
}

json figures_json(const speed_figures& f) {
  return {{"link_bytes_per_s", f.link_bytes_per_s},
          {"decode_tok_s", f.decode_tok_s},
          {"prefill_tok_s", prefill_json(f.prefill_tok_s)}};
}

json speed_json(const speed_estimate& e) {
  const auto& c = e.calibration;
  json j;
  j["note"] = "a model, not a measurement: each device's share of a token's bytes and FLOPs over its spec "
              "bandwidth and fp16 rate times the fractions of those the kernels reach on one H200";
  j["calibration"] = {{"source", std::string(c.source)},
                      {"decode_of_spec_bandwidth", c.decode},
                      {"prefill_of_spec_fp16", prefill_json(c.prefill)}};
  j["decode_tokens"] = k_decode_tokens;
  j["devices"] = json::array();
  for (size_t d = 0; d < e.devices.size(); ++d) {
    const device_cost& dc = e.devices[d];
    const gpu_model* g = e.gpus[d];
    j["devices"].push_back({{"index", d},
                            {"gpu", g ? json(std::string(g->name)) : json(nullptr)},
                            {"bandwidth_bytes_per_s", g ? json(g->bandwidth) : json(nullptr)},
                            {"fp16_flops", g ? json(g->fp16_flops) : json(nullptr)},
                            {"decode_bytes_per_token", dc.decode_bytes()},
                            {"weight_bytes", dc.weight_bytes},
                            {"state_bytes", dc.state_bytes},
                            {"kv_bytes", dc.kv_bytes},
                            {"prefill_flops_per_token", prefill_json(dc.prefill_flops)}});
  }
  j["link_bytes_per_token"] = {{"decode", e.decode_link_bytes}, {"prefill", e.prefill_link_bytes}};
  j["peer"] = figures_json(e.peer);
  j["host_staged"] = figures_json(e.host);
  return j;
}

}  // namespace

std::string plan_to_json(const model_desc& desc, const memory_plan& p, bool with_tensors, const speed_estimate* speed) {
  const auto& hp = desc.hp;
  json j;
  j["model"] = {{"arch", std::string(desc.arch->name)}, {"n_layer", hp.n_layer},     {"n_head", hp.n_head},
                {"n_head_kv", hp.n_head_kv},            {"head_dim", hp.head_dim},   {"n_embd", hp.n_embd},
                {"n_ff", hp.n_ff},                      {"n_vocab", hp.n_vocab},     {"tensor_bytes", p.model_tensor_bytes}};
  if (const delta_net_shape dn = delta_net_of(hp); dn.n_k_heads) {
    j["model"]["n_attention_layers"] = hp.n_attention_layers();
    j["model"]["delta_net"] = {{"n_layers", hp.n_delta_net_layers()}, {"n_k_heads", dn.n_k_heads},
                               {"n_v_heads", dn.n_v_heads},          {"k_dim", dn.k_dim},
                               {"v_dim", dn.v_dim},                  {"conv_kernel", dn.kernel}};
  }
  if (hp.moe()) {
    const active_weights a = active_per_token(desc);
    j["model"]["experts"] = {{"n_expert", hp.n_expert},
                             {"n_expert_used", hp.n_expert_used},
                             {"n_ff_exp", hp.n_ff_exp},
                             {"n_ff_shexp", hp.n_ff_shexp},
                             {"weights_norm", hp.expert_weights_norm},
                             {"expert_bytes", routed_expert_bytes(desc)},
                             {"active_bytes_per_token", a.bytes}};
  }
  j["run"] = {{"n_ctx", p.n_ctx},       {"n_seqs", p.n_seqs},         {"n_batch", p.n_batch},
              {"n_logits", p.n_logits}, {"block_size", p.block_size}, {"kv_type", std::string(type_name(p.kv_type))}};
  j["split"] = std::string(split_mode_name(p.split));
  j["ratios"] = p.ratios;
  j["default_ratios"] = p.default_ratios;
  j["main_device"] = p.main_device;
  j["devices"] = json::array();
  for (size_t d = 0; d < p.devices.size(); ++d) {
    const auto& dv = p.devices[d];
    const auto& u = p.usage[d];
    const auto& s = p.shares[d];
    json e;
    e["index"] = d;
    e["name"] = dv.name;
    e["cuda_id"] = dv.cuda_id >= 0 ? json(dv.cuda_id) : json(nullptr);
    e["total_bytes"] = dv.total_bytes;
    e["free_bytes"] = dv.free_bytes;
    e["cap_bytes"] = dv.cap_bytes ? json(dv.cap_bytes) : json(nullptr);
    e["share"] = {{"layers", {s.layer_begin, s.layer_end}},
                  {"kv_heads", {s.kv_head_begin, s.kv_head_end}},
                  {"ffn_columns", {s.ffn_begin, s.ffn_end}},
                  {"embeddings", s.embeddings},
                  {"output", s.output}};
    if (delta_net_of(hp).n_k_heads) {
      e["share"]["delta_net_k_heads"] = {s.dn_head_begin, s.dn_head_end};
      json runs = json::array();
      for (const auto& [b, en] : delta_net_value_runs(hp, s)) runs.push_back({b, en});
      e["share"]["delta_net_v_heads"] = runs;
    }
    e["bytes"] = {{"weights", u.weights},         {"experts", u.experts},     {"kv_cache", u.kv_cache},
                  {"recurrent_state", u.state},
                  {"activations", u.activations}, {"workspace", u.workspace}, {"overhead", u.overhead},
                  {"total", u.total}};
    e["tensor_bytes"] = u.tensor_bytes;
    e["capacity"] = u.capacity;
    e["available"] = u.available;
    e["fits"] = u.fits;
    e["shortfall"] = u.shortfall;
    j["devices"].push_back(e);
  }
  j["fits"] = p.fits;
  j["reasons"] = p.reasons;
  j["notes"] = p.notes;
  if (speed) j["speed_model"] = speed_json(*speed);
  if (with_tensors) {
    j["tensors"] = json::array();
    for (const auto& t : p.tensors) {
      json e = {{"name", t.tensor->name}, {"device", t.device}, {"kind", std::string(kind_name(t.kind))}};
      if (t.kind == placement_kind::rows || t.kind == placement_kind::columns) e["range"] = {t.begin, t.end};
      e["bytes"] = t.file_bytes;
      j["tensors"].push_back(e);
    }
  }
  return j.dump(2) + "\n";
}

std::string plan_to_text(const model_desc& desc, const memory_plan& p, const speed_estimate* speed) {
  const auto& hp = desc.hp;
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line,
                "model    %s: %u layers, %u query / %u KV heads of %u, embedding %u, FFN %u, vocabulary %u; %s of "
                "tensors\n",
                std::string(desc.arch->name).c_str(), hp.n_layer, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_embd,
                hp.n_ff, hp.n_vocab, plan_bytes_text(p.model_tensor_bytes).c_str());
  os << line;
  if (const delta_net_shape dn = delta_net_of(hp); dn.n_k_heads) {
    std::snprintf(line, sizeof line,
                  "         %u attention + %u Gated DeltaNet layers (key heads %u / value heads %u of %u x %u, "
                  "conv %u)\n",
                  hp.n_attention_layers(), hp.n_delta_net_layers(), dn.n_k_heads, dn.n_v_heads, dn.k_dim, dn.v_dim,
                  dn.kernel);
    os << line;
  }
  if (hp.moe()) {
    const active_weights a = active_per_token(desc);
    std::snprintf(line, sizeof line,
                  "         %u experts of %u, %u per token%s%s; experts %s, a decode token reads %s of weights\n",
                  hp.n_expert, hp.n_ff_exp, hp.n_expert_used, hp.expert_weights_norm ? " (renormalised)" : "",
                  hp.n_ff_shexp ? (", shared expert of " + std::to_string(hp.n_ff_shexp)).c_str() : "",
                  plan_bytes_text(routed_expert_bytes(desc)).c_str(), plan_bytes_text(a.bytes).c_str());
    os << line;
  }
  std::snprintf(line, sizeof line, "run      context %u x %u sequence%s, batch %u, %u logit row%s per batch, KV %s\n",
                p.n_ctx, p.n_seqs, p.n_seqs == 1 ? "" : "s", p.n_batch, p.n_logits, p.n_logits == 1 ? "" : "s",
                std::string(type_name(p.kv_type)).c_str());
  os << line;
  os << "split    " << split_mode_name(p.split);
  if (p.split != split_mode::none)
    os << ", ratios " << ratio_text(p.ratios) << (p.default_ratios ? " (default: time balanced within memory)" : "");
  // A layer split puts the embeddings on its first device and the head on its last; the device
  // lines below say which, so the main device is only named where it places something.
  if (p.split != split_mode::layer) os << ", main device " << p.main_device;
  os << "\n\n";

  // The state column only for models that keep recurrent state.
  bool any_state = false;
  for (const auto& u : p.usage) any_state = any_state || u.state > 0;
  auto state_cell = [any_state](const std::string& v) {
    char cell[32] = "";
    if (any_state) std::snprintf(cell, sizeof cell, " %11s", v.c_str());
    return std::string(cell);
  };
  // The experts column only for MoE models.
  const bool any_experts = hp.moe();
  auto experts_cell = [any_experts](const std::string& v) {
    char cell[32] = "";
    if (any_experts) std::snprintf(cell, sizeof cell, " %11s", v.c_str());
    return std::string(cell);
  };
  std::snprintf(line, sizeof line, "%-22s %11s%s %11s%s %11s %11s %11s %11s %11s  %s\n", "device", "weights",
                experts_cell("experts").c_str(), "KV cache", state_cell("state").c_str(), "activations", "workspace",
                "overhead", "total", "available", "fits");
  os << line;
  for (size_t d = 0; d < p.devices.size(); ++d) {
    const auto& u = p.usage[d];
    const std::string label = std::to_string(d) + " " + p.devices[d].name.substr(0, 19);
    std::snprintf(line, sizeof line, "%-22s %11s%s %11s%s %11s %11s %11s %11s %11s  %s\n", label.c_str(),
                  plan_bytes_text(u.weights).c_str(), experts_cell(plan_bytes_text(u.experts)).c_str(),
                  plan_bytes_text(u.kv_cache).c_str(),
                  state_cell(plan_bytes_text(u.state)).c_str(), plan_bytes_text(u.activations).c_str(),
                  plan_bytes_text(u.workspace).c_str(), plan_bytes_text(u.overhead).c_str(),
                  plan_bytes_text(u.total).c_str(), plan_bytes_text(u.available).c_str(), u.fits ? "yes" : "NO");
    os << line;
  }
  os << "\n";
  for (size_t d = 0; d < p.devices.size(); ++d) os << "device " << d << " holds " << share_text(desc, p, p.shares[d]) << "\n";
  os << "\n" << (p.fits ? "fits: yes\n" : "fits: no\n");
  for (const auto& r : p.reasons) os << "  " << r << "\n";
  for (const auto& n : p.notes) os << "note: " << n << "\n";
  if (speed) os << speed_text(p, *speed);
  return os.str();
}

}  // namespace tandem
