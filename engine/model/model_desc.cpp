// Binds an architecture's expected tensors to a GGUF file, checking names, shapes and types.
#include "model/model_desc.h"

#include <sstream>

#include "quant/quant.h"

namespace tandem {
namespace {

std::string shape_str(const uint64_t* dims, size_t n) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < n; ++i) os << (i ? ", " : "") << dims[i];
  os << ']';
  return os.str();
}

status check_tensor(const tensor_spec& spec, const gguf_tensor& t) {
  // GGUF may carry trailing unit dims; they do not change the layout.
  bool same = t.n_dims >= spec.shape.size();
  for (size_t i = 0; same && i < 4; ++i) {
    uint64_t want = i < spec.shape.size() ? spec.shape[i] : 1;
    if (t.dims[i] != want) same = false;
  }
  if (!same)
    return make_error("tensor ", spec.name, " has shape ", shape_str(t.dims, t.n_dims),
                      ", expected ", shape_str(spec.shape.data(), spec.shape.size()));
  if (!role_is_matrix(spec.role) && t.type != ggml_type::f32 && t.type != ggml_type::f16 &&
      t.type != ggml_type::bf16)
    return make_error("tensor ", spec.name, " has type ", type_name(t.type), ", expected a float type (F32, F16, BF16)");
  if (!can_dequantize(t.type))
    return make_error("tensor ", spec.name, " has type ", type_name(t.type),
                      ", which the engine cannot compute with");
  return {};
}


}  // namespace

result<model_desc> bind_model(const gguf_file& file) {
  auto arch_name = file.get_string("general.architecture");
  if (!arch_name) return arch_name.err();
  model_desc d;
  d.arch = find_arch(*arch_name);
  if (!d.arch) {
    std::string known;
    for (auto a : known_archs()) known += (known.empty() ? "" : ", ") + std::string(a);
    return make_error("unsupported architecture '", *arch_name, "' (known: ", known, ")");
  }
  auto hp = read_hparams(*d.arch, file);
  if (!hp) return hp.err();
  d.hp = *hp;
  d.layers.resize(d.hp.n_layer);
  for (const auto& spec : expected_tensors(*d.arch, d.hp)) {
    const gguf_tensor* t = file.find_tensor(spec.name);
    if (!t) return make_error("missing tensor ", spec.name, " (architecture ", d.arch->name, ")");
    TANDEM_TRY(check_tensor(spec, *t));
    if (spec.layer < 0) {
      if (spec.name == "token_embd.weight") d.token_embd = t;
      else if (spec.name == "output_norm.weight") d.output_norm = t;
      else if (spec.name == "output.weight") d.output = t;
      continue;
    }
    d.layers[spec.layer].*spec.slot = t;
  }
  if (d.hp.tied_output) d.output = d.token_embd;
  return d;
}

std::vector<const gguf_tensor*> model_tensors(const model_desc& d) {
  std::vector<const gguf_tensor*> out;
  for (const gguf_tensor* t : {d.token_embd, d.output_norm})
    if (t) out.push_back(t);
  if (!d.hp.tied_output && d.output) out.push_back(d.output);
  for (const auto& l : d.layers)
    for (const gguf_tensor* t : {l.attn_norm, l.wq, l.wk, l.wv, l.bq, l.bk, l.bv, l.q_norm, l.k_norm, l.wo, l.dn_qkv,
                                 l.dn_gate, l.dn_conv, l.dn_dt_bias, l.dn_a, l.dn_beta, l.dn_alpha, l.dn_norm, l.dn_out,
                                 l.ffn_norm, l.ffn_gate, l.ffn_up, l.ffn_down, l.ffn_gate_inp, l.ffn_gate_exps,
                                 l.ffn_up_exps, l.ffn_down_exps, l.ffn_gate_inp_shexp, l.ffn_gate_shexp,
                                 l.ffn_up_shexp, l.ffn_down_shexp})
      if (t) out.push_back(t);
  return out;
}

uint64_t model_tensor_bytes(const model_desc& d) {
  uint64_t n = 0;
  for (const gguf_tensor* t : model_tensors(d)) n += t->n_bytes;
  return n;
}

result<loaded_model> load_model(const std::string& path) {
  auto f = gguf_file::open(path);
  if (!f) return f.err();
  loaded_model m;
  m.file = std::make_unique<gguf_file>(std::move(f.value()));
  auto d = bind_model(*m.file);
  if (!d) return make_error(path, ": ", d.message());
  m.desc = std::move(d.value());
  return m;
}

}  // namespace tandem
