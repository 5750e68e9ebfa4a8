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
  ASSERT_NE(find_arch("qwen3moe"), nullptr);
  ASSERT_NE(find_arch("qwen35moe"), nullptr);
  EXPECT_TRUE(find_arch("qwen3moe")->flags.moe);
  EXPECT_FALSE(find_arch("qwen3moe")->flags.shared_expert);
  EXPECT_FALSE(find_arch("qwen3moe")->flags.hybrid);
  EXPECT_TRUE(find_arch("qwen3moe")->flags.qk_norm);
  EXPECT_EQ(find_arch("qwen3moe")->flags.rope, rope_style::neox);
  EXPECT_TRUE(find_arch("qwen35moe")->flags.moe);
  EXPECT_TRUE(find_arch("qwen35moe")->flags.shared_expert);
  EXPECT_TRUE(find_arch("qwen35moe")->flags.hybrid);
  EXPECT_FALSE(find_arch("qwen3")->flags.moe);
  EXPECT_EQ(known_archs().size(), 6u);
}

TEST(arch_spec, qwen3moe_expert_tensors_replace_the_dense_ffn) {
  const hparams hp = test::tiny_model_options::qwen3moe_hparams();
  const auto specs = expected_tensors(*find_arch("qwen3moe"), hp);
  EXPECT_EQ(find(specs, "blk.0.ffn_gate.weight"), nullptr);
  EXPECT_EQ(find(specs, "blk.1.ffn_down.weight"), nullptr);
  EXPECT_EQ(find(specs, "blk.0.ffn_gate_inp_shexp.weight"), nullptr);
  ASSERT_NE(find(specs, "blk.0.ffn_norm.weight"), nullptr);
  const auto* router = find(specs, "blk.1.ffn_gate_inp.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_EQ(router->shape, (std::vector<uint64_t>{64, 8}));
  EXPECT_EQ(router->role, tensor_role::router);
  const auto* gate = find(specs, "blk.1.ffn_gate_exps.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->shape, (std::vector<uint64_t>{64, 32, 8}));  // {n_embd, n_ff_exp, n_expert}
  EXPECT_EQ(find(specs, "blk.1.ffn_up_exps.weight")->shape, (std::vector<uint64_t>{64, 32, 8}));
  EXPECT_EQ(find(specs, "blk.1.ffn_down_exps.weight")->shape, (std::vector<uint64_t>{32, 64, 8}));
  // llama.cpp's converter order: norm, router, gate, up, down.
  const auto pos = [&](const std::string& n) { return find(specs, n) - specs.data(); };
  EXPECT_LT(pos("blk.0.ffn_norm.weight"), pos("blk.0.ffn_gate_inp.weight"));
  EXPECT_LT(pos("blk.0.ffn_gate_inp.weight"), pos("blk.0.ffn_gate_exps.weight"));
  EXPECT_LT(pos("blk.0.ffn_up_exps.weight"), pos("blk.0.ffn_down_exps.weight"));
}

TEST(arch_spec, qwen35moe_has_a_shared_expert_in_every_layer_kind) {
  const hparams hp = test::tiny_model_options::qwen35moe_hparams();
  const auto specs = expected_tensors(*find_arch("qwen35moe"), hp);
  for (const char* l : {"blk.0.", "blk.3."}) {  // a DeltaNet and the attention layer
    const std::string b = l;
    ASSERT_NE(find(specs, b + "ffn_gate_inp_shexp.weight"), nullptr);
    EXPECT_EQ(find(specs, b + "ffn_gate_inp_shexp.weight")->shape, (std::vector<uint64_t>{64}));
    EXPECT_EQ(find(specs, b + "ffn_gate_shexp.weight")->shape, (std::vector<uint64_t>{64, 64}));
    EXPECT_EQ(find(specs, b + "ffn_down_shexp.weight")->shape, (std::vector<uint64_t>{64, 64}));
    EXPECT_EQ(find(specs, b + "ffn_down_exps.weight")->shape, (std::vector<uint64_t>{32, 64, 8}));
    EXPECT_NE(find(specs, b + "post_attention_norm.weight"), nullptr);
    EXPECT_EQ(find(specs, b + "ffn_up.weight"), nullptr);
  }
  EXPECT_NE(find(specs, "blk.0.ssm_a"), nullptr);
  EXPECT_NE(find(specs, "blk.3.attn_q.weight"), nullptr);
}

// Writes a tiny MoE model with one key replaced (or removed, when value < 0) and binds it.
result<model_desc> bind_moe_with(const std::string& arch, const std::string& k, int64_t value,
                                 std::vector<uint8_t>& keep) {
  test::tiny_model_options o;
  o.arch = arch;
  o.hp = arch == "qwen35moe" ? test::tiny_model_options::qwen35moe_hparams()
                             : test::tiny_model_options::qwen3moe_hparams();
  auto bytes = test::tiny_model_bytes(o);
  if (!bytes) return bytes.err();
  auto f = gguf_file::parse(*bytes);
  if (!f) return f.err();
  gguf_writer w;
  for (const auto& kv : f->metadata())
    if (kv.key != k) w.set(kv.key, kv.value);
  if (value >= 0) w.set_u32(k, uint32_t(value));
  for (const auto& t : f->tensors())
    TANDEM_TRY(w.add_tensor(t.name, t.type, std::vector<uint64_t>(t.dims, t.dims + t.n_dims),
                            std::vector<uint8_t>(t.data, t.data + t.n_bytes)));
  auto out = w.write_to_memory();
  if (!out) return out.err();
  keep = std::move(*out);
  static std::unique_ptr<gguf_file> file;  // the description points into it
  auto g = gguf_file::parse(keep);
  if (!g) return g.err();
  file = std::make_unique<gguf_file>(std::move(*g));
  return bind_model(*file);
}

TEST(model_desc, moe_hparams_round_trip_and_bind) {
  std::vector<uint8_t> keep;
  auto d = bind_moe_with("qwen35moe", "none", -1, keep);
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(d->hp.n_expert, 8u);
  EXPECT_EQ(d->hp.n_expert_used, 2u);
  EXPECT_EQ(d->hp.n_ff_exp, 32u);
  EXPECT_EQ(d->hp.n_ff_shexp, 64u);
  EXPECT_TRUE(d->hp.expert_weights_norm);
  ASSERT_NE(d->layers[0].ffn_gate_exps, nullptr);
  EXPECT_EQ(d->layers[0].ffn_gate_exps->n_dims, 3u);
  EXPECT_EQ(d->layers[0].ffn_gate, nullptr);
  EXPECT_NE(d->layers[2].ffn_gate_inp_shexp, nullptr);
  EXPECT_NE(d->layers[3].ffn_down_shexp, nullptr);
}

TEST(model_desc, moe_keys_are_checked_and_named) {
  std::vector<uint8_t> keep;
  auto too_many = bind_moe_with("qwen3moe", "qwen3moe.expert_used_count", 9, keep);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.message().find("qwen3moe.expert_used_count (9) must be 1..qwen3moe.expert_count (8)"),
            std::string::npos)
      << too_many.message();
  auto no_count = bind_moe_with("qwen3moe", "qwen3moe.expert_count", -1, keep);
  ASSERT_FALSE(no_count.ok());
  EXPECT_NE(no_count.message().find("qwen3moe.expert_count"), std::string::npos) << no_count.message();
  // Without expert_feed_forward_length the width defaults to n_ff / k (llama.cpp): 96 / 2 = 48,
  // which these tensors contradict; the error names the tensor and both shapes.
  auto dflt = bind_moe_with("qwen3moe", "qwen3moe.expert_feed_forward_length", -1, keep);
  ASSERT_FALSE(dflt.ok());
  EXPECT_NE(dflt.message().find("ffn_gate_exps.weight has shape [64, 32, 8], expected [64, 48, 8]"),
            std::string::npos)
      << dflt.message();
  // qwen35moe files carry no feed_forward_length: without the shared width there is no default.
  auto no_shared = bind_moe_with("qwen35moe", "qwen35moe.expert_shared_feed_forward_length", -1, keep);
  ASSERT_FALSE(no_shared.ok());
  EXPECT_NE(no_shared.message().find("qwen35moe.expert_shared_feed_forward_length"), std::string::npos)
      << no_shared.message();
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

// Dense models split; hybrid and MoE ones do not yet, and the reason names the model and why.
TEST(arch_spec, split_unsupported_names_hybrid_and_moe_models) {
  using test::tiny_model_options;
  EXPECT_EQ(split_unsupported("qwen3", tiny_model_options::default_hparams()), "");
  EXPECT_EQ(split_unsupported("qwen35", tiny_model_options::qwen35_hparams()),
            "splitting qwen35 (Gated DeltaNet hybrid) over several GPUs is not supported yet");
  EXPECT_EQ(split_unsupported("qwen3moe", tiny_model_options::qwen3moe_hparams()),
            "splitting qwen3moe (mixture of experts) over several GPUs is not supported yet");
  // Both hybrid and MoE: the experts are named, as the CUDA backend checks them first.
  EXPECT_EQ(split_unsupported("qwen35moe", tiny_model_options::qwen35moe_hparams()),
            "splitting qwen35moe (mixture of experts) over several GPUs is not supported yet");
}

}  // namespace
}  // namespace tandem
