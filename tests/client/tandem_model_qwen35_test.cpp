// tandem-model make for the hybrid qwen35 presets: the tiny one must bind (bind_model) with every
// role stored as the converter stores it (only matrices quantized; conv kernels, decays, norms and
// biases F32) and sensible random values; the 27B preset must have Qwen3.5-27B's shape; and the
// quantize rule (by name) must agree with the role table on every qwen35 tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gguf/gguf_reader.h"
#include "model/model_desc.h"
#include "presets.h"
#include "quant/quant.h"
#include "quant_mix.h"
#include "tandem_model_harness.h"

namespace tandem {
namespace {

using TandemModel = test::tandem_model_test;

std::vector<float> floats(const gguf_tensor& t) {
  std::vector<float> v(t.n_elements);
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  return v;
}

TEST_F(TandemModel, Qwen35TinyBindsWithConverterTypesAndValues) {
  for (const std::string type : {"F16", "Q8_0", "Q4_K_M"}) {
    const std::string m = make("q35-" + type + ".gguf", "--preset qwen3.5-tiny --type " + type);
    auto f = gguf_file::open(m);
    ASSERT_TRUE(f.ok()) << f.message();
    auto desc = bind_model(*f);
    ASSERT_TRUE(desc.ok()) << type << ": " << desc.message();
    EXPECT_EQ(desc->arch->name, "qwen35");
    EXPECT_EQ(desc->hp.n_delta_net_layers(), 3u);
    EXPECT_EQ(desc->hp.n_attention_layers(), 1u);
    EXPECT_EQ(desc->hp.rope_dim, 16u);
    for (const auto& s : expected_tensors(*desc->arch, desc->hp)) {
      const gguf_tensor* t = f->find_tensor(s.name);
      ASSERT_NE(t, nullptr) << s.name;
      if (!role_is_matrix(s.role)) {
        EXPECT_EQ(t->type, ggml_type::f32) << type << " " << s.name;
      } else if (type != "F16") {
        EXPECT_NE(type_info(t->type).block_size, 1u) << type << " " << s.name << " is not quantized";
      }
    }
  }
  auto f = gguf_file::open(path("q35-F16.gguf"));
  ASSERT_TRUE(f.ok());
  const auto a = floats(*f->find_tensor("blk.0.ssm_a"));
  ASSERT_EQ(a.size(), 4u);
  for (float x : a) EXPECT_TRUE(x <= -0.5f && x >= -8.f) << x;
  EXPECT_NE(a[0], a[1]);  // per head, not one constant
  const auto conv = floats(*f->find_tensor("blk.1.ssm_conv1d.weight"));
  float mx = 0, sq = 0;
  for (float x : conv) mx = std::max(mx, std::fabs(x)), sq += x * x;
  const float rms = std::sqrt(sq / float(conv.size()));
  EXPECT_GT(rms, 0.15f);
  EXPECT_LT(rms, 0.35f);
  EXPECT_LT(mx, 2.f);
  for (float x : floats(*f->find_tensor("blk.2.ssm_norm.weight"))) EXPECT_EQ(x, 1.f);
  for (float x : floats(*f->find_tensor("blk.3.post_attention_norm.weight"))) EXPECT_EQ(x, 1.f);
}

TEST_F(TandemModel, Qwen35MakeIsDeterministicAndChecksShapes) {
  const std::string a = make("a.gguf", "--preset qwen3.5-tiny --seed 4 --type Q8_0 --threads 1");
  const std::string b = make("b.gguf", "--preset qwen3.5-tiny --seed 4 --type Q8_0 --threads 2");
  EXPECT_EQ(test::slurp(a), test::slurp(b));
  // A head too small for the RoPE sections is refused before anything is written.
  const auto r = run("make --preset qwen3.5-tiny --head-dim 16 -o " + path("x.gguf"));
  EXPECT_NE(r.code, 0);
  EXPECT_TRUE(test::has(r.err, "RoPE sections")) << r.err;
}

TEST(Qwen35Presets, Qwen35_27bHasThePublishedShape) {
  const model_preset* p = find_preset("qwen3.5-27b");
  ASSERT_NE(p, nullptr);
  const arch_spec* arch = find_arch(p->arch);
  ASSERT_NE(arch, nullptr);
  const hparams& hp = p->hp;
  EXPECT_TRUE(check_hybrid_hparams(*arch, hp).ok());
  EXPECT_EQ(hp.n_embd, 5120u);
  EXPECT_EQ(hp.n_layer, 64u);
  EXPECT_EQ(hp.n_attention_layers(), 16u);
  EXPECT_EQ(hp.n_head, 24u);
  EXPECT_EQ(hp.n_head_kv, 4u);
  EXPECT_EQ(hp.head_dim, 256u);
  EXPECT_EQ(hp.rope_dim, 64u);
  EXPECT_EQ(hp.n_ff, 17408u);
  EXPECT_EQ(hp.n_vocab, 248320u);
  EXPECT_EQ(hp.n_ctx_train, 262144u);
  EXPECT_FLOAT_EQ(hp.rope_theta, 1e7f);
  EXPECT_EQ(hp.rope_sections, (std::array<uint32_t, 4>{11, 11, 10, 0}));
  const delta_net_shape dn = delta_net_of(hp);
  EXPECT_EQ(dn.n_k_heads, 16u);
  EXPECT_EQ(dn.n_v_heads, 48u);
  EXPECT_EQ(dn.k_dim, 128u);
  EXPECT_EQ(dn.v_dim, 128u);
  EXPECT_EQ(dn.kernel, 4u);
  uint64_t params = 0;
  for (const auto& s : expected_tensors(*arch, hp)) {
    uint64_t n = 1;
    for (auto d : s.shape) n *= d;
    params += n;
  }
  // The text model of Qwen3.5-27B: about 26.9e9 weights with both embeddings (no vision, no MTP).
  EXPECT_GT(params, 26.0e9);
  EXPECT_LT(params, 28.0e9);
}

// quantize has only names to go by: its rule must pick exactly the role table's matrices.
TEST(Qwen35Presets, QuantizeRuleMatchesTheRoles) {
  const model_preset* p = find_preset("qwen3.5-tiny");
  ASSERT_NE(p, nullptr);
  for (const auto& s : expected_tensors(*find_arch("qwen35"), p->hp))
    EXPECT_EQ(is_quantizable(s.name, static_cast<uint32_t>(s.shape.size())), role_is_matrix(s.role)) << s.name;
}

}  // namespace
}  // namespace tandem
