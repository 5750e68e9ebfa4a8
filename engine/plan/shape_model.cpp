// Builds a data-less model description from expected_tensors(), binding each tensor to its slot
// the way bind_model() does for a file.
#include "plan/shape_model.h"

namespace tandem {
namespace {

const gguf_tensor** slot_of(model_desc& d, const tensor_spec& s) {
  if (s.layer < 0) {
    if (s.name == "token_embd.weight") return &d.token_embd;
    if (s.name == "output_norm.weight") return &d.output_norm;
    if (s.name == "output.weight") return &d.output;
    return nullptr;
  }
  return &(d.layers[s.layer].*s.slot);
}

}  // namespace

result<std::unique_ptr<shape_model>> make_shape_model(std::string_view arch, const hparams& hp,
                                                      const tensor_type_rule& type_of) {
  auto m = std::make_unique<shape_model>();
  m->desc.arch = find_arch(arch);
  if (!m->desc.arch) return make_error("unknown architecture '", arch, "'");
  if (hp.n_layer == 0 || hp.n_embd == 0 || hp.n_head == 0 || hp.n_head_kv == 0 || hp.head_dim == 0)
    return make_error("model shape has a zero dimension");
  m->desc.hp = hp;
  m->desc.layers.resize(hp.n_layer);
  for (const auto& spec : expected_tensors(*m->desc.arch, hp)) {
    gguf_tensor t;
    t.name = spec.name;
    t.type = type_of(spec);
    t.n_dims = static_cast<uint32_t>(spec.shape.size());
    t.n_elements = 1;
    for (size_t i = 0; i < spec.shape.size(); ++i) t.dims[i] = spec.shape[i], t.n_elements *= spec.shape[i];
    const auto rb = row_bytes(t.type, t.dims[0]);
    if (!rb)
      return make_error("tensor ", t.name, ": rows of ", t.dims[0], " are not whole ", type_name(t.type), " blocks");
    t.n_bytes = *rb * (t.n_elements / t.dims[0]);
    const gguf_tensor** slot = slot_of(m->desc, spec);
    if (!slot) return make_error("internal: no slot for tensor ", spec.name);
    m->tensors.push_back(std::move(t));
    *slot = &m->tensors.back();
  }
  if (hp.tied_output) m->desc.output = m->desc.token_embd;
  return m;
}

}  // namespace tandem
