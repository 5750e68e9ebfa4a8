// Tiny random-weight models for the engine tests.
#include "tiny_model.h"

#include <cmath>
#include <random>

#include "gguf/gguf_writer.h"
#include "quant/quant.h"

namespace tandem::test {

hparams tiny_model_options::default_hparams() {
  hparams hp;
  hp.n_vocab = 96;
  hp.n_ctx_train = 256;
  hp.n_embd = 64;
  hp.n_layer = 2;
  hp.n_ff = 96;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 32;
  hp.rope_dim = 32;
  hp.rms_eps = 1e-6f;
  hp.rope_theta = 10000.f;
  return hp;
}

hparams tiny_model_options::qwen35_hparams() {
  hparams hp = default_hparams();
  hp.n_layer = 4;  // three DeltaNet layers, then one attention layer
  hp.rope_dim = 8;
  hp.full_attn_interval = 4;
  hp.ssm_conv_kernel = 4;
  hp.ssm_state = 32;
  hp.ssm_groups = 2;
  hp.ssm_dt_rank = 4;
  hp.ssm_inner = 4 * 32;
  hp.rope_sections = {2, 1, 1, 0};
  return hp;
}

hparams tiny_model_options::qwen3moe_hparams() {
  hparams hp = default_hparams();
  hp.n_expert = 8;
  hp.n_expert_used = 2;
  hp.n_ff_exp = 32;  // not n_ff: the experts' own width
  hp.expert_weights_norm = true;
  return hp;
}

hparams tiny_model_options::qwen35moe_hparams() {
  hparams hp = qwen35_hparams();
  hp.n_ff = 0;  // as llama.cpp's converter writes qwen35moe: no feed_forward_length
  hp.n_expert = 8;
  hp.n_expert_used = 2;
  hp.n_ff_exp = 32;
  hp.n_ff_shexp = 64;
  hp.expert_weights_norm = true;
  return hp;
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::vector<float> out(n);
  for (auto& v : out) v = lo + (hi - lo) * float(double(rng() >> 11) * 0x1.0p-53);
  return out;
}

namespace {

std::vector<uint8_t> encode(ggml_type type, const std::vector<float>& values, uint64_t row_len) {
  const uint64_t rows = values.size() / row_len;
  const uint64_t rb = *row_bytes(type, row_len);
  std::vector<uint8_t> out(rb * rows);
  for (uint64_t r = 0; r < rows; ++r)
    quantize_row(type, values.data() + r * row_len, out.data() + r * rb, int64_t(row_len));
  return out;
}

}  // namespace

result<std::vector<uint8_t>> tiny_model_bytes(const tiny_model_options& opt) {
  const arch_spec* arch = find_arch(opt.arch);
  if (!arch) return make_error("unknown arch ", opt.arch);
  gguf_writer w;
  write_hparams(*arch, opt.hp, w);
  if (opt.write_tokens) {
    std::vector<std::string> toks;
    // std::string("t") += ...: `"t" + to_string` trips a false -Wrestrict in GCC 12.
    for (uint32_t i = 0; i < opt.hp.n_vocab; ++i) toks.push_back(std::string("t") += std::to_string(i));
    w.set("tokenizer.ggml.tokens", gguf_string_array(toks));
  }
  uint64_t seed = opt.seed;
  for (auto spec : expected_tensors(*arch, opt.hp)) {
    ++seed;
    if (spec.name == opt.skip_tensor) continue;
    if (spec.name == opt.misshape_tensor) spec.shape.back() += 1;
    uint64_t n = 1;
    for (auto d : spec.shape) n *= d;
    std::vector<float> v;
    ggml_type type = ggml_type::f32;
    switch (spec.role) {
      case tensor_role::norm: v = random_floats(n, seed, 0.8f, 1.2f); break;
      case tensor_role::bias: v = random_floats(n, seed, -0.2f, 0.2f); break;
      case tensor_role::conv: v = random_floats(n, seed, -0.6f, 0.6f); break;
      case tensor_role::decay: v = random_floats(n, seed, -4.f, -0.05f); break;
      case tensor_role::router: {
        // Logits of O(1): routing that differs between tokens, weights far from uniform.
        const float a = 3.f / std::sqrt(float(spec.shape[0]));
        v = random_floats(n, seed, -a, a);
        break;
      }
      case tensor_role::embedding:
      case tensor_role::matrix: {
        // Scaled so activations stay O(1) through the layers.
        const float a = 1.5f / std::sqrt(float(spec.shape[0]));
        v = random_floats(n, seed, -a, a);
        type = opt.matrix_type;
        if (spec.role == tensor_role::embedding) for (auto& x : v) x *= 20.f;
        break;
      }
    }
    TANDEM_TRY(w.add_tensor(spec.name, type, spec.shape, encode(type, v, spec.shape[0])));
  }
  return w.write_to_memory();
}

result<std::unique_ptr<tiny_model>> make_tiny_model(const tiny_model_options& opt) {
  auto bytes = tiny_model_bytes(opt);
  if (!bytes) return bytes.err();
  auto m = std::make_unique<tiny_model>();
  m->bytes = std::move(bytes.value());
  auto f = gguf_file::parse(m->bytes);
  if (!f) return f.err();
  m->file = std::make_unique<gguf_file>(std::move(f.value()));
  auto d = bind_model(*m->file);
  if (!d) return d.err();
  m->desc = std::move(d.value());
  return m;
}

}  // namespace tandem::test
