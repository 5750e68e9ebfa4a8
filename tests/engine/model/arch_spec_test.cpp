// Architecture tables and model binding: names, shapes, flags, hyperparameter round trip, errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "gguf/gguf_writer.h"
#include "model/arch_spec.h"
#include "model/model_desc.h"
#include "tiny_model.h"

namespace tandem {
namespace {

const tensor_spec* find(const std::vector<tensor_spec>& v, const std::string& name) {
  auto it = std::find_if(v.begin(), v.end(), [&](const tensor_spec& s) { return s.name == name; });
  return it == v.end() ? nullptr : &*it;
}

TEST(arch_spec, known_architectures_and_flags) {
  ASSERT_NE(find_arch("llama"), nullptr);
  ASSERT_NE(find_arch("qwen2"), nullptr);
  ASSERT_NE(find_arch("qwen3"), nullptr);
  EXPECT_EQ(find_arch("gpt2"), nullptr);
  EXPECT_EQ(find_arch("llama")->flags.rope, rope_style::normal);
  EXPECT_EQ(find_arch("qwen2")->flags.rope, rope_style::neox);
  EXPECT_TRUE(find_arch("qwen2")->flags.qkv_bias);
  EXPECT_TRUE(find_arch("qwen3")->flags.qk_norm);
  EXPECT_FALSE(find_arch("qwen3")->flags.qkv_bias);
  ASSERT_NE(find_arch("qwen35"), nullptr);
  EXPECT_TRUE(find_arch("qwen35")->flags.hybrid);
  EXPECT_FALSE(find_arch("qwen3")->flags.hybrid);
  EXPECT_EQ(known_archs().size(), 4u);
}

TEST(arch_spec, qwen3_tensor_names_and_shapes) {
  hparams hp = test::tiny_model_options::default_hparams();
  hp.head_dim = 48;  // differs from n_embd / n_head, as in Qwen3
  auto t = expected_tensors(*find_arch("qwen3"), hp);
  // token_embd + per layer (norm, q, k, v, q_norm, k_norm, output, ffn_norm, gate, up, down)
  // + output_norm + output.
  EXPECT_EQ(t.size(), 1 + 11 * hp.n_layer + 2);
  EXPECT_EQ(t.front().name, "token_embd.weight");
  EXPECT_EQ(t.back().name, "output.weight");
  const auto* q = find(t, "blk.1.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<uint64_t>{hp.n_embd, uint64_t(hp.n_head) * 48}));
  EXPECT_EQ(q->layer, 1);
  EXPECT_EQ(find(t, "blk.0.attn_k.weight")->shape,
            (std::vector<uint64_t>{hp.n_embd, uint64_t(hp.n_head_kv) * 48}));
  EXPECT_EQ(find(t, "blk.0.attn_output.weight")->shape,
            (std::vector<uint64_t>{uint64_t(hp.n_head) * 48, hp.n_embd}));
  EXPECT_EQ(find(t, "blk.0.attn_q_norm.weight")->shape, (std::vector<uint64_t>{48}));
  EXPECT_EQ(find(t, "blk.0.ffn_down.weight")->shape, (std::vector<uint64_t>{hp.n_ff, hp.n_embd}));
  EXPECT_EQ(find(t, "blk.0.attn_q.bias"), nullptr);
  hp.tied_output = true;
  EXPECT_EQ(expected_tensors(*find_arch("qwen3"), hp).back().name, "output_norm.weight");
}

TEST(arch_spec, qwen2_has_biases_llama_has_neither) {
  hparams hp = test::tiny_model_options::default_hparams();
  auto q2 = expected_tensors(*find_arch("qwen2"), hp);
  ASSERT_NE(find(q2, "blk.0.attn_v.bias"), nullptr);
  EXPECT_EQ(find(q2, "blk.0.attn_v.bias")->role, tensor_role::bias);
  EXPECT_EQ(find(q2, "blk.0.attn_k.bias")->shape,
            (std::vector<uint64_t>{uint64_t(hp.n_head_kv) * hp.head_dim}));
  EXPECT_EQ(find(q2, "blk.0.attn_q_norm.weight"), nullptr);
  auto ll = expected_tensors(*find_arch("llama"), hp);
  EXPECT_EQ(find(ll, "blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(find(ll, "blk.0.attn_k_norm.weight"), nullptr);
  EXPECT_EQ(ll.size(), 1 + 9 * hp.n_layer + 2);
}

TEST(model_desc, hparams_round_trip_and_binding) {
  test::tiny_model_options opt;
  opt.hp.rope_theta = 1e6f;
  opt.hp.rms_eps = 1e-5f;
  opt.write_tokens = true;
  auto m = test::make_tiny_model(opt);
  ASSERT_TRUE(m.ok()) << m.message();
  const auto& d = (*m)->desc;
  EXPECT_EQ(d.arch->name, "qwen3");
  EXPECT_EQ(d.hp.n_vocab, opt.hp.n_vocab);
  EXPECT_EQ(d.hp.n_embd, opt.hp.n_embd);
  EXPECT_EQ(d.hp.n_head_kv, opt.hp.n_head_kv);
  EXPECT_EQ(d.hp.head_dim, opt.hp.head_dim);
  EXPECT_FLOAT_EQ(d.hp.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(d.hp.rms_eps, 1e-5f);
  EXPECT_FALSE(d.hp.tied_output);
  ASSERT_EQ(d.layers.size(), 2u);
  EXPECT_EQ(d.layers[1].q_norm->name, "blk.1.attn_q_norm.weight");
  EXPECT_EQ(d.layers[0].bq, nullptr);
  EXPECT_EQ(d.output->name, "output.weight");
}

TEST(model_desc, tied_output_uses_embedding) {
  test::tiny_model_options opt;
  opt.arch = "qwen2";
  opt.hp.tied_output = true;
  auto m = test::make_tiny_model(opt);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_TRUE((*m)->desc.hp.tied_output);
  EXPECT_EQ((*m)->desc.output, (*m)->desc.token_embd);
  EXPECT_NE((*m)->desc.layers[0].bv, nullptr);
}

TEST(model_desc, missing_tensor_is_named) {
  test::tiny_model_options opt;
  opt.skip_tensor = "blk.1.ffn_up.weight";
  auto m = test::make_tiny_model(opt);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("missing tensor blk.1.ffn_up.weight"), std::string::npos) << m.message();
}

TEST(model_desc, misshaped_tensor_is_named) {
  test::tiny_model_options opt;
  opt.arch = "llama";
  opt.misshape_tensor = "blk.0.attn_k.weight";
  auto m = test::make_tiny_model(opt);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.message().find("blk.0.attn_k.weight has shape [64, 65], expected [64, 64]"),
            std::string::npos)
      << m.message();
}

TEST(model_desc, missing_key_and_unknown_arch_are_errors) {
  gguf_writer w;
  w.set_string("general.architecture", "qwen3");
  w.set_u32("qwen3.context_length", 128);
  auto bytes = w.write_to_memory();
  ASSERT_TRUE(bytes.ok());
  auto f = gguf_file::parse(*bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  auto d = bind_model(*f);
  ASSERT_FALSE(d.ok());
  // No token_embd and no tokens: the vocabulary size cannot be known.
  EXPECT_NE(d.message().find("vocabulary"), std::string::npos) << d.message();

  gguf_writer w2;
  w2.set_string("general.architecture", "mamba");
  auto b2 = w2.write_to_memory();
  auto f2 = gguf_file::parse(*b2);
  ASSERT_TRUE(f2.ok());
  auto d2 = bind_model(*f2);
  ASSERT_FALSE(d2.ok());
  EXPECT_NE(d2.message().find("unsupported architecture 'mamba'"), std::string::npos);
}

TEST(model_desc, missing_hparam_key_is_named) {
  test::tiny_model_options opt;
  auto bytes = test::tiny_model_bytes(opt);
  ASSERT_TRUE(bytes.ok());
  auto f = gguf_file::parse(*bytes);
  ASSERT_TRUE(f.ok());
  auto hp = read_hparams(*find_arch("llama"), *f);  // the file's keys say qwen3.*
  ASSERT_FALSE(hp.ok());
  EXPECT_NE(hp.message().find("llama.context_length"), std::string::npos) << hp.message();
}

}  // namespace
}  // namespace tandem
