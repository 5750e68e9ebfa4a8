// Imports tiny synthetic MoE checkpoints — qwen3moe with one tensor per expert (the Hub layout)
// and with fused experts (transformers 5's gate_up_proj / down_proj), qwen35moe fused under
// model.language_model. with its shared expert — and checks the 3-D expert tensors row by row
// against the HF tensors (expert e's rows at e·n_out), the router and shared-expert gate as F32,
// the expert metadata, that both layouts give the same GGUF, and the config errors.
#include <gtest/gtest.h>

#include <map>

#include "backend/cpu/cpu_backend.h"
#include "convert/hf_import.h"
#include "gguf/gguf_reader.h"
#include "model/model_desc.h"
#include "quant/quant.h"
#include "st_test_util.h"

namespace tandem {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// hidden 64, 2 layers, attention 4/2 heads of 16, 4 experts of 32 (top-2), shared expert 48.
constexpr uint64_t H = 64, NH = 4, NKV = 2, HD = 16, NE = 4, FE = 32, FS = 48, V = 80;

using tensors = std::map<std::string, std::pair<std::vector<uint64_t>, std::vector<float>>>;

struct checkpoint {
  json config;
  tensors t;
};

void add(tensors& t, std::mt19937& rng, const std::string& name, std::vector<uint64_t> shape) {
  uint64_t n = 1;
  for (auto d : shape) n *= d;
  t[name] = {shape, test::random_floats(n, rng)};
}

json qwen3moe_config() {
  return {{"model_type", "qwen3_moe"}, {"architectures", {"Qwen3MoeForCausalLM"}},
          {"hidden_size", H},          {"num_hidden_layers", 2},
          {"num_attention_heads", NH}, {"num_key_value_heads", NKV},
          {"head_dim", HD},            {"intermediate_size", 96},
          {"moe_intermediate_size", FE}, {"num_experts", NE},
          {"num_experts_per_tok", 2},  {"norm_topk_prob", true},
          {"decoder_sparse_step", 1},  {"mlp_only_layers", json::array()},
          {"vocab_size", V},           {"max_position_embeddings", 2048},
          {"rms_norm_eps", 1e-6},      {"rope_theta", 1e6},
          {"hidden_act", "silu"},      {"tie_word_embeddings", false}};
}

// Per-expert tensors (fused = false) or transformers 5's fused ones, from the same numbers.
checkpoint qwen3moe(bool fused, uint32_t seed = 3) {
  checkpoint c{qwen3moe_config(), {}};
  std::mt19937 rng(seed);
  add(c.t, rng, "model.embed_tokens.weight", {V, H});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(c.t, rng, p + "input_layernorm.weight", {H});
    add(c.t, rng, p + "post_attention_layernorm.weight", {H});
    add(c.t, rng, p + "self_attn.q_proj.weight", {NH * HD, H});
    add(c.t, rng, p + "self_attn.k_proj.weight", {NKV * HD, H});
    add(c.t, rng, p + "self_attn.v_proj.weight", {NKV * HD, H});
    add(c.t, rng, p + "self_attn.o_proj.weight", {H, NH * HD});
    add(c.t, rng, p + "self_attn.q_norm.weight", {HD});
    add(c.t, rng, p + "self_attn.k_norm.weight", {HD});
    add(c.t, rng, p + "mlp.gate.weight", {NE, H});
    tensors per;
    for (uint64_t e = 0; e < NE; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      add(per, rng, x + "gate_proj.weight", {FE, H});
      add(per, rng, x + "up_proj.weight", {FE, H});
      add(per, rng, x + "down_proj.weight", {H, FE});
    }
    if (!fused) {
      c.t.insert(per.begin(), per.end());
      continue;
    }
    std::vector<float> gate_up, down;
    for (uint64_t e = 0; e < NE; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      for (const char* w : {"gate_proj.weight", "up_proj.weight"}) {
        const auto& v = per.at(x + w).second;
        gate_up.insert(gate_up.end(), v.begin(), v.end());
      }
      const auto& d = per.at(x + "down_proj.weight").second;
      down.insert(down.end(), d.begin(), d.end());
    }
    c.t[p + "mlp.experts.gate_up_proj"] = {{NE, 2 * FE, H}, gate_up};
    c.t[p + "mlp.experts.down_proj"] = {{NE, H, FE}, down};
  }
  add(c.t, rng, "model.norm.weight", {H});
  add(c.t, rng, "lm_head.weight", {V, H});
  return c;
}

void write(const checkpoint& c, const fs::path& dir) {
  fs::create_directories(dir);
  test::write_text(dir / "config.json", c.config.dump(2));
  std::vector<test::st_entry> entries;
  for (const auto& [name, t] : c.t) entries.push_back({name, "F32", t.first, test::as_bytes(t.second)});
  test::write_file(dir / "model.safetensors", test::make_safetensors(entries, {{"format", "pt"}}));
}

std::vector<float> values(const gguf_tensor& t) {
  std::vector<float> out(t.n_elements);
  const uint64_t rb = *row_bytes(t.type, t.dims[0]);
  for (uint64_t r = 0; r < t.n_elements / t.dims[0]; ++r)
    dequantize_row(t.type, t.data + r * rb, out.data() + r * t.dims[0], int64_t(t.dims[0]));
  return out;
}

// Expert e's rows of a 3-D GGUF tensor: rows [e·n_out, (e+1)·n_out) of n_in.
std::vector<float> expert_rows(const gguf_tensor& t, uint64_t e) {
  const auto all = values(t);
  const uint64_t n = t.dims[0] * t.dims[1];
  return {all.begin() + e * n, all.begin() + (e + 1) * n};
}

class hf_import_moe : public test::scratch_dir_test {};

TEST_F(hf_import_moe, qwen3moe_per_expert_tensors_stack_into_3d_tensors) {
  const checkpoint c = qwen3moe(false);
  write(c, dir_ / "hf");
  import_options opt;
  opt.type = ggml_type::f32;
  auto s = import_hf_model((dir_ / "hf").string(), (dir_ / "m.gguf").string(), opt);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->arch, "qwen3moe");
  auto m = load_model((dir_ / "m.gguf").string());
  ASSERT_TRUE(m.ok()) << m.message();
  const auto& hp = m->desc.hp;
  EXPECT_EQ(hp.n_expert, NE);
  EXPECT_EQ(hp.n_expert_used, 2u);
  EXPECT_EQ(hp.n_ff_exp, FE);
  EXPECT_EQ(hp.n_ff, 96u);
  EXPECT_TRUE(hp.expert_weights_norm);
  const auto& L = m->desc.layers[1];
  ASSERT_NE(L.ffn_gate_exps, nullptr);
  EXPECT_EQ(L.ffn_gate_exps->n_dims, 3u);
  EXPECT_EQ(L.ffn_down_exps->dims[0], FE);
  EXPECT_EQ(L.ffn_down_exps->dims[1], H);
  EXPECT_EQ(L.ffn_gate_inp->type, ggml_type::f32);
  EXPECT_EQ(values(*L.ffn_gate_inp), c.t.at("model.layers.1.mlp.gate.weight").second);
  for (uint64_t e = 0; e < NE; ++e) {
    const std::string x = "model.layers.1.mlp.experts." + std::to_string(e) + ".";
    EXPECT_EQ(expert_rows(*L.ffn_gate_exps, e), c.t.at(x + "gate_proj.weight").second) << e;
    EXPECT_EQ(expert_rows(*L.ffn_up_exps, e), c.t.at(x + "up_proj.weight").second) << e;
    EXPECT_EQ(expert_rows(*L.ffn_down_exps, e), c.t.at(x + "down_proj.weight").second) << e;
  }
  // The norms get no +1 (qwen3's RMSNorm computes x * w).
  EXPECT_EQ(values(*L.ffn_norm), c.t.at("model.layers.1.post_attention_layernorm.weight").second);
}

TEST_F(hf_import_moe, fused_experts_give_the_same_file_and_it_runs) {
  write(qwen3moe(false), dir_ / "per");
  write(qwen3moe(true), dir_ / "fused");
  import_options opt;
  opt.type = ggml_type::q8_0;
  opt.name = "same";
  ASSERT_TRUE(import_hf_model((dir_ / "per").string(), (dir_ / "a.gguf").string(), opt).ok());
  auto s = import_hf_model((dir_ / "fused").string(), (dir_ / "b.gguf").string(), opt);
  ASSERT_TRUE(s.ok()) << s.message();
  auto a = load_model((dir_ / "a.gguf").string()), b = load_model((dir_ / "b.gguf").string());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->file->tensors().size(), b->file->tensors().size());
  for (size_t i = 0; i < a->file->tensors().size(); ++i) {
    const auto &ta = a->file->tensors()[i], &tb = b->file->tensors()[i];
    EXPECT_EQ(ta.name, tb.name);
    ASSERT_EQ(ta.n_bytes, tb.n_bytes) << ta.name;
    EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.n_bytes), 0) << ta.name;
  }
  auto be = make_cpu_backend(b->desc, {1});
  ASSERT_TRUE(be.ok()) << be.message();
  kv_cache_config kc;
  kc.n_ctx = 64;
  auto cache = (*be)->make_cache(kc);
  ASSERT_TRUE(cache.ok());
  batch bt;
  for (int i = 0; i < 5; ++i) bt.add(i * 7 % int(V), 0, i, i == 4);
  std::vector<float> logits;
  ASSERT_TRUE((*be)->forward(bt, **cache, logits).ok());
  EXPECT_EQ(logits.size(), V);
}

TEST_F(hf_import_moe, qwen35moe_fused_with_a_shared_expert) {
  // Two DeltaNet-free layers would not be qwen35: 4 layers, the last full attention.
  json text = {{"model_type", "qwen3_5_moe_text"}, {"hidden_size", H}, {"num_hidden_layers", 4},
               {"num_attention_heads", NH}, {"num_key_value_heads", NKV}, {"head_dim", HD},
               {"vocab_size", V}, {"max_position_embeddings", 4096}, {"rms_norm_eps", 1e-6},
               {"hidden_act", "silu"}, {"tie_word_embeddings", false}, {"linear_conv_kernel_dim", 4},
               {"linear_key_head_dim", 16}, {"linear_value_head_dim", 8}, {"linear_num_key_heads", 2},
               {"linear_num_value_heads", 4}, {"moe_intermediate_size", FE}, {"shared_expert_intermediate_size", FS},
               {"num_experts", NE}, {"num_experts_per_tok", 2},
               {"layer_types", {"linear_attention", "linear_attention", "linear_attention", "full_attention"}},
               {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25},
                                    {"mrope_section", {1, 1, 0}}}}};
  checkpoint c;
  c.config = {{"model_type", "qwen3_5_moe"}, {"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
              {"text_config", text}, {"vision_config", {{"depth", 1}}}};
  std::mt19937 rng(5);
  const std::string lm = "model.language_model.";
  add(c.t, rng, lm + "embed_tokens.weight", {V, H});
  const uint64_t KEY = 32, VAL = 32, CONV = 2 * KEY + VAL;
  for (int l = 0; l < 4; ++l) {
    const std::string p = lm + "layers." + std::to_string(l) + ".";
    add(c.t, rng, p + "input_layernorm.weight", {H});
    add(c.t, rng, p + "post_attention_layernorm.weight", {H});
    if (l == 3) {
      add(c.t, rng, p + "self_attn.q_proj.weight", {2 * NH * HD, H});
      add(c.t, rng, p + "self_attn.k_proj.weight", {NKV * HD, H});
      add(c.t, rng, p + "self_attn.v_proj.weight", {NKV * HD, H});
      add(c.t, rng, p + "self_attn.o_proj.weight", {H, NH * HD});
      add(c.t, rng, p + "self_attn.q_norm.weight", {HD});
      add(c.t, rng, p + "self_attn.k_norm.weight", {HD});
    } else {
      add(c.t, rng, p + "linear_attn.in_proj_qkv.weight", {CONV, H});
      add(c.t, rng, p + "linear_attn.in_proj_z.weight", {VAL, H});
      add(c.t, rng, p + "linear_attn.in_proj_b.weight", {4, H});
      add(c.t, rng, p + "linear_attn.in_proj_a.weight", {4, H});
      add(c.t, rng, p + "linear_attn.A_log", {4});
      add(c.t, rng, p + "linear_attn.dt_bias", {4});
      add(c.t, rng, p + "linear_attn.conv1d.weight", {CONV, 1, 4});
      add(c.t, rng, p + "linear_attn.norm.weight", {8});
      add(c.t, rng, p + "linear_attn.out_proj.weight", {H, VAL});
    }
    add(c.t, rng, p + "mlp.gate.weight", {NE, H});
    add(c.t, rng, p + "mlp.experts.gate_up_proj", {NE, 2 * FE, H});
    add(c.t, rng, p + "mlp.experts.down_proj", {NE, H, FE});
    add(c.t, rng, p + "mlp.shared_expert.gate_proj.weight", {FS, H});
    add(c.t, rng, p + "mlp.shared_expert.up_proj.weight", {FS, H});
    add(c.t, rng, p + "mlp.shared_expert.down_proj.weight", {H, FS});
    add(c.t, rng, p + "mlp.shared_expert_gate.weight", {1, H});
  }
  add(c.t, rng, lm + "norm.weight", {H});
  add(c.t, rng, "lm_head.weight", {V, H});
  add(c.t, rng, "model.visual.blocks.0.attn.qkv.weight", {8, 8});
  write(c, dir_ / "hf");
  import_options opt;
  opt.type = ggml_type::f32;
  auto s = import_hf_model((dir_ / "hf").string(), (dir_ / "m.gguf").string(), opt);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->arch, "qwen35moe");
  auto m = load_model((dir_ / "m.gguf").string());
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->desc.hp.n_ff_shexp, FS);
  EXPECT_TRUE(m->desc.hp.expert_weights_norm);  // the Qwen3.5 MoE router always renormalises
  EXPECT_EQ(m->file->find("qwen35moe.feed_forward_length"), nullptr);
  for (int l : {0, 3}) {
    const auto& L = m->desc.layers[l];
    const std::string p = lm + "layers." + std::to_string(l) + ".";
    const auto& gu = c.t.at(p + "mlp.experts.gate_up_proj").second;
    for (uint64_t e = 0; e < NE; ++e) {
      const auto g = expert_rows(*L.ffn_gate_exps, e), u = expert_rows(*L.ffn_up_exps, e);
      EXPECT_TRUE(std::equal(g.begin(), g.end(), gu.begin() + e * 2 * FE * H)) << l << " " << e;
      EXPECT_TRUE(std::equal(u.begin(), u.end(), gu.begin() + (e * 2 + 1) * FE * H)) << l << " " << e;
    }
    EXPECT_EQ(values(*L.ffn_down_exps), c.t.at(p + "mlp.experts.down_proj").second);
    EXPECT_EQ(L.ffn_gate_inp_shexp->type, ggml_type::f32);
    EXPECT_EQ(L.ffn_gate_inp_shexp->n_dims, 1u);
    EXPECT_EQ(values(*L.ffn_gate_inp_shexp), c.t.at(p + "mlp.shared_expert_gate.weight").second);
    EXPECT_EQ(values(*L.ffn_down_shexp), c.t.at(p + "mlp.shared_expert.down_proj.weight").second);
  }
}

TEST_F(hf_import_moe, errors_name_the_field_or_tensor) {
  checkpoint c = qwen3moe(false);
  c.config["mlp_only_layers"] = {1};
  write(c, dir_ / "a");
  auto a = import_hf_model((dir_ / "a").string(), (dir_ / "a.gguf").string(), {});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.message().find("mlp_only_layers"), std::string::npos) << a.message();

  c = qwen3moe(false);
  c.config["num_experts_per_tok"] = 5;
  write(c, dir_ / "b");
  auto b = import_hf_model((dir_ / "b").string(), (dir_ / "b.gguf").string(), {});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("num_experts_per_tok (5) exceeds num_experts (4)"), std::string::npos) << b.message();

  c = qwen3moe(false);
  c.t.erase("model.layers.0.mlp.experts.2.up_proj.weight");
  write(c, dir_ / "c");
  auto d = import_hf_model((dir_ / "c").string(), (dir_ / "c.gguf").string(), {});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.message().find("expert 2 of blk.0.ffn_up_exps.weight"), std::string::npos) << d.message();

  c = qwen3moe(false);
  c.t["model.layers.0.mlp.experts.7.up_proj.weight"] = {{FE, H}, std::vector<float>(FE * H)};
  write(c, dir_ / "d");
  auto e = import_hf_model((dir_ / "d").string(), (dir_ / "d.gguf").string(), {});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("experts.7.up_proj.weight\" is not part of a qwen3_moe model"), std::string::npos)
      << e.message();

  checkpoint f = qwen3moe(true);
  f.t["model.layers.1.mlp.experts.0.gate_proj.weight"] = {{FE, H}, std::vector<float>(FE * H)};
  write(f, dir_ / "e");
  auto g = import_hf_model((dir_ / "e").string(), (dir_ / "e.gguf").string(), {});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("already does"), std::string::npos) << g.message();
}

}  // namespace
}  // namespace tandem
