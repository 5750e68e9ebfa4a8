// Imports a tiny synthetic Qwen3.5 checkpoint (2 key heads, 4 value heads, so the V-head reorder
// moves things) and checks the GGUF against expectations written here independently of the
// importer: names, shapes, types, metadata, the grouped -> tiled reorder, +1 on the norms (not
// ssm_norm) and ssm_a = -exp(A_log); plus the nested "qwen3_5" layout and config errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "convert/hf_import.h"
#include "gguf/gguf_reader.h"
#include "model/model_desc.h"
#include "quant/quant.h"
#include "st_test_util.h"

namespace tandem {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Shapes: hidden 64, 4 layers (3 DeltaNet + 1 attention), attention 4/2 heads of 32 (q_proj
// doubled for the gate), DeltaNet 2 key heads of 16, 4 value heads of 8, conv kernel 4.
constexpr uint64_t H = 64, L = 4, NH = 4, NKV = 2, HD = 32, F = 96, V = 100;
constexpr uint64_t HK = 2, HV = 4, DK = 16, DV = 8, K = 4;
constexpr uint64_t KEY = HK * DK, VAL = HV * DV, CONV = 2 * KEY + VAL;

struct hf_tensor {
  std::vector<uint64_t> shape;  // PyTorch order
  std::vector<float> values;
};

struct tiny_qwen35 {
  json config;
  std::map<std::string, hf_tensor> tensors;
};

json text_config() {
  return {{"model_type", "qwen3_5_text"},
          {"architectures", {"Qwen3_5ForCausalLM"}},
          {"hidden_size", H},
          {"num_hidden_layers", L},
          {"layer_types", {"linear_attention", "linear_attention", "linear_attention", "full_attention"}},
          {"num_attention_heads", NH},
          {"num_key_value_heads", NKV},
          {"head_dim", HD},
          {"intermediate_size", F},
          {"vocab_size", V},
          {"max_position_embeddings", 4096},
          {"rms_norm_eps", 1e-6},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"linear_conv_kernel_dim", K},
          {"linear_key_head_dim", DK},
          {"linear_value_head_dim", DV},
          {"linear_num_key_heads", HK},
          {"linear_num_value_heads", HV},
          {"rope_parameters",
           {{"rope_type", "default"},
            {"rope_theta", 1e7},
            {"partial_rotary_factor", 0.25},
            {"mrope_section", {2, 1, 1}},
            {"mrope_interleaved", true}}}};
}

tiny_qwen35 make_model(uint32_t seed) {
  tiny_qwen35 m;
  m.config = text_config();
  std::mt19937 rng(seed);
  auto add = [&](const std::string& name, std::vector<uint64_t> shape) {
    uint64_t n = 1;
    for (auto d : shape) n *= d;
    m.tensors[name] = {shape, test::random_floats(n, rng)};
  };
  add("model.embed_tokens.weight", {V, H});
  for (uint64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {H});
    add(p + "post_attention_layernorm.weight", {H});
    if (l == 3) {
      add(p + "self_attn.q_proj.weight", {2 * NH * HD, H});
      add(p + "self_attn.k_proj.weight", {NKV * HD, H});
      add(p + "self_attn.v_proj.weight", {NKV * HD, H});
      add(p + "self_attn.o_proj.weight", {H, NH * HD});
      add(p + "self_attn.q_norm.weight", {HD});
      add(p + "self_attn.k_norm.weight", {HD});
    } else {
      add(p + "linear_attn.in_proj_qkv.weight", {CONV, H});
      add(p + "linear_attn.in_proj_z.weight", {VAL, H});
      add(p + "linear_attn.in_proj_b.weight", {HV, H});
      add(p + "linear_attn.in_proj_a.weight", {HV, H});
      add(p + "linear_attn.A_log", {HV});
      add(p + "linear_attn.dt_bias", {HV});
      add(p + "linear_attn.conv1d.weight", {CONV, 1, K});
      add(p + "linear_attn.norm.weight", {DV});
      add(p + "linear_attn.out_proj.weight", {H, VAL});
    }
    add(p + "mlp.gate_proj.weight", {F, H});
    add(p + "mlp.up_proj.weight", {F, H});
    add(p + "mlp.down_proj.weight", {H, F});
  }
  add("model.norm.weight", {H});
  add("lm_head.weight", {V, H});
  // The multi-token-prediction head: not part of the text model, skipped like llama.cpp does.
  add("mtp.fc.weight", {H, 2 * H});
  add("mtp.layers.0.input_layernorm.weight", {H});
  return m;
}

void write_model(const tiny_qwen35& m, const fs::path& dir, const std::string& prefix_from = "",
                 const std::string& prefix_to = "") {
  fs::create_directories(dir);
  test::write_text(dir / "config.json", m.config.dump(2));
  std::vector<test::st_entry> entries;
  for (const auto& [name, t] : m.tensors) {
    std::string n = name;
    if (!prefix_from.empty() && n.starts_with(prefix_from)) n = prefix_to + n.substr(prefix_from.size());
    entries.push_back({n, "F32", t.shape, test::as_bytes(t.values)});
  }
  test::write_file(dir / "model.safetensors", test::make_safetensors(entries, {{"format", "pt"}}));
}

// Grouped -> tiled, spelled out: value head j of key group g sits at g*r + j in HF and at
// j*HK + g in the GGUF. `rows` of `row_len` values per head entry start at row `first`.
std::vector<float> tile_rows(const std::vector<float>& w, uint64_t first, uint64_t head_rows, uint64_t row_len) {
  std::vector<float> out = w;
  const uint64_t r = HV / HK;
  for (uint64_t g = 0; g < HK; ++g)
    for (uint64_t j = 0; j < r; ++j)
      for (uint64_t d = 0; d < head_rows; ++d) {
        const uint64_t from = first + (g * r + j) * head_rows + d, to = first + (j * HK + g) * head_rows + d;
        std::copy_n(w.begin() + from * row_len, row_len, out.begin() + to * row_len);
      }
  return out;
}

// The same on the columns of each row (ssm_out's inputs).
std::vector<float> tile_cols(const std::vector<float>& w, uint64_t n_cols, uint64_t head_cols) {
  std::vector<float> out = w;
  const uint64_t r = HV / HK;
  for (uint64_t row = 0; row < w.size() / n_cols; ++row)
    for (uint64_t g = 0; g < HK; ++g)
      for (uint64_t j = 0; j < r; ++j)
        for (uint64_t d = 0; d < head_cols; ++d)
          out[row * n_cols + (j * HK + g) * head_cols + d] = w[row * n_cols + (g * r + j) * head_cols + d];
  return out;
}

// The GGUF tensor's expected values, from the HF tensor of the table in the task.
std::vector<float> expected(const std::string& gguf, const tiny_qwen35& m) {
  static const std::map<std::string, std::string> stems = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"post_attention_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight"},
      {"attn_gate.weight", "linear_attn.in_proj_z.weight"},
      {"ssm_beta.weight", "linear_attn.in_proj_b.weight"},
      {"ssm_alpha.weight", "linear_attn.in_proj_a.weight"},
      {"ssm_a", "linear_attn.A_log"},
      {"ssm_dt.bias", "linear_attn.dt_bias"},
      {"ssm_conv1d.weight", "linear_attn.conv1d.weight"},
      {"ssm_norm.weight", "linear_attn.norm.weight"},
      {"ssm_out.weight", "linear_attn.out_proj.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  std::string hf, stem = gguf;
  if (gguf == "token_embd.weight") hf = "model.embed_tokens.weight";
  else if (gguf == "output_norm.weight") hf = "model.norm.weight";
  else if (gguf == "output.weight") hf = "lm_head.weight";
  else {
    const size_t a = gguf.find('.'), b = gguf.find('.', a + 1);
    stem = gguf.substr(b + 1);
    hf = "model.layers." + gguf.substr(a + 1, b - a - 1) + "." + stems.at(stem);
  }
  std::vector<float> w = m.tensors.at(hf).values;
  if (stem.ends_with("norm.weight") && stem != "ssm_norm.weight")
    for (float& x : w) x += 1.f;
  if (stem == "ssm_a")
    for (float& x : w) x = -std::exp(x);
  if (stem == "attn_qkv.weight") w = tile_rows(w, 2 * KEY, DV, H);
  if (stem == "ssm_conv1d.weight") w = tile_rows(w, 2 * KEY, DV, K);
  if (stem == "attn_gate.weight") w = tile_rows(w, 0, DV, H);
  if (stem == "ssm_beta.weight" || stem == "ssm_alpha.weight") w = tile_rows(w, 0, 1, H);
  if (stem == "ssm_a" || stem == "ssm_dt.bias") w = tile_rows(w, 0, 1, 1);
  if (stem == "ssm_out.weight") w = tile_cols(w, VAL, DV);
  return w;
}

std::vector<float> dequantized(const gguf_tensor& t) {
  std::vector<float> out(t.n_elements);
  const uint64_t n_in = t.dims[0], rows = t.n_elements / n_in;
  const uint64_t rb = *row_bytes(t.type, n_in);
  for (uint64_t r = 0; r < rows; ++r)
    dequantize_row(t.type, t.data + r * rb, out.data() + r * n_in, static_cast<int64_t>(n_in));
  return out;
}

class hf_import_qwen35 : public test::scratch_dir_test {
 protected:
  result<import_summary> run(const fs::path& dir, ggml_type type) {
    import_options opt;
    opt.type = type;
    opt.threads = 3;
    return import_hf_model(dir.string(), out_.string(), opt);
  }
  void SetUp() override {
    scratch_dir_test::SetUp();
    out_ = dir_ / "out.gguf";
  }
  fs::path out_;
};

TEST_F(hf_import_qwen35, f32_import_matches_the_converter) {
  const auto m = make_model(1);
  write_model(m, dir_ / "q35");
  auto s = run(dir_ / "q35", ggml_type::f32);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->arch, "qwen35");
  auto f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(*f->get_string("general.architecture"), "qwen35");
  EXPECT_EQ(*f->get_uint("qwen35.ssm.conv_kernel"), K);
  EXPECT_EQ(*f->get_uint("qwen35.ssm.state_size"), DK);
  EXPECT_EQ(*f->get_uint("qwen35.ssm.group_count"), HK);
  EXPECT_EQ(*f->get_uint("qwen35.ssm.time_step_rank"), HV);
  EXPECT_EQ(*f->get_uint("qwen35.ssm.inner_size"), VAL);
  EXPECT_EQ(*f->get_uint("qwen35.full_attention_interval"), 4u);
  EXPECT_EQ(*f->get_uint("qwen35.rope.dimension_count"), HD / 4);
  EXPECT_EQ(*f->get_uint("qwen35.attention.key_length"), HD);
  EXPECT_EQ(*f->get_int_array("qwen35.rope.dimension_sections"), (std::vector<int64_t>{2, 1, 1, 0}));
  EXPECT_FLOAT_EQ(static_cast<float>(*f->get_float("qwen35.rope.freq_base")), 1e7f);

  // Every tensor the architecture expects, in order, with the converter's values; nothing else.
  auto desc = bind_model(*f);
  ASSERT_TRUE(desc.ok()) << desc.message();
  EXPECT_EQ(desc->hp.kind(2), layer_kind::delta_net);
  EXPECT_EQ(desc->hp.kind(3), layer_kind::attention);
  const auto specs = expected_tensors(*desc->arch, desc->hp);
  ASSERT_EQ(f->tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const gguf_tensor& t = f->tensors()[i];
    ASSERT_EQ(t.name, specs[i].name);
    for (size_t d = 0; d < specs[i].shape.size(); ++d) EXPECT_EQ(t.dims[d], specs[i].shape[d]) << t.name;
    EXPECT_EQ(t.type, ggml_type::f32) << t.name;
    EXPECT_EQ(dequantized(t), expected(t.name, m)) << t.name;
  }
  // The reorder moved something (HV != HK): the v rows of attn_qkv differ from HF's order.
  EXPECT_NE(dequantized(*f->find_tensor("blk.0.attn_gate.weight")),
            m.tensors.at("model.layers.0.linear_attn.in_proj_z.weight").values);
  EXPECT_FALSE(s->notes.empty());  // the two mtp tensors were left out
}

TEST_F(hf_import_qwen35, quantized_import_keeps_vectors_and_conv_f32) {
  write_model(make_model(2), dir_ / "q35");
  ASSERT_TRUE(run(dir_ / "q35", ggml_type::q8_0).ok());
  auto f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok());
  for (const auto& t : f->tensors()) {
    const bool vector_like = t.n_dims == 1 || t.name.ends_with("ssm_conv1d.weight");
    EXPECT_EQ(t.type, vector_like ? ggml_type::f32 : ggml_type::q8_0) << t.name;
  }
}

// A Qwen3_5ForConditionalGeneration checkpoint: text config nested, tensors under
// model.language_model., a vision tower to skip. The text model must come out byte for byte the same.
TEST_F(hf_import_qwen35, nested_multimodal_layout_gives_the_same_file) {
  auto m = make_model(3);
  write_model(m, dir_ / "text");
  ASSERT_TRUE(run(dir_ / "text", ggml_type::f16).ok());
  fs::rename(out_, dir_ / "text.gguf");

  tiny_qwen35 vl = m;
  json text = m.config;
  text.erase("architectures");
  vl.config = {{"model_type", "qwen3_5"}, {"architectures", {"Qwen3_5ForConditionalGeneration"}},
               {"text_config", text}, {"vision_config", {{"depth", 2}}}, {"tie_word_embeddings", false}};
  vl.tensors["model.visual.patch_embed.proj.weight"] = {{8}, std::vector<float>(8, 0.5f)};
  write_model(vl, dir_ / "vl", "model.", "model.language_model.");
  auto s = run(dir_ / "vl", ggml_type::f16);
  ASSERT_TRUE(s.ok()) << s.message();
  auto a = gguf_file::open((dir_ / "text.gguf").string());
  auto b = gguf_file::open(out_.string());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    const auto &ta = a->tensors()[i], &tb = b->tensors()[i];
    ASSERT_EQ(ta.name, tb.name);
    ASSERT_EQ(ta.n_bytes, tb.n_bytes);
    EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.n_bytes), 0) << ta.name;
  }
}

TEST(hf_config_qwen35, defaults_follow_transformers_and_errors_name_the_field) {
  // Fields left out by save_pretrained take Qwen3_5TextConfig's defaults.
  auto c = parse_hf_config(R"({"model_type":"qwen3_5_text","num_hidden_layers":8})", "config.json");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->arch->name, "qwen35");
  EXPECT_EQ(c->hp.head_dim, 256u);
  EXPECT_EQ(c->hp.rope_dim, 64u);
  EXPECT_EQ(c->hp.ssm_groups, 16u);
  EXPECT_EQ(c->hp.ssm_dt_rank, 32u);
  EXPECT_EQ(c->hp.ssm_inner, 32u * 128u);
  EXPECT_EQ(c->hp.full_attn_interval, 4u);
  EXPECT_EQ(c->hp.rope_sections, (std::array<uint32_t, 4>{11, 11, 10, 0}));

  auto err = [](json edit) {
    json j = text_config();
    for (const auto& [k, v] : edit.items()) j[k] = v;
    auto r = parse_hf_config(j.dump(), "config.json");
    return r.ok() ? std::string("ok") : r.message();
  };
  // Every 2nd layer attends except layer 2: no single interval describes that.
  EXPECT_NE(err({{"layer_types", {"linear_attention", "full_attention", "full_attention", "full_attention"}}})
                .find("layer_types[2]"),
            std::string::npos);
  EXPECT_EQ(err({{"layer_types", {"linear_attention", "full_attention", "linear_attention", "full_attention"}}}), "ok");
  EXPECT_NE(err({{"linear_num_value_heads", 3}}).find("multiple"), std::string::npos);
  EXPECT_NE(err({{"rope_parameters", {{"rope_theta", 1e7}, {"mrope_section", {11, 11, 10}}}}}).find("mrope_section"),
            std::string::npos);
  EXPECT_NE(err({{"attn_output_gate", false}}).find("attn_output_gate"), std::string::npos);
  auto nested = parse_hf_config(R"({"model_type":"qwen3_5"})", "config.json");
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.message().find("text_config"), std::string::npos);
}

TEST(hf_names_qwen35, v_head_reorder_index) {
  // 2 key heads, 4 value heads of size 1: GGUF order [g0v0, g1v0, g0v1, g1v1] = HF [0, 2, 1, 3].
  const uint64_t want[] = {0, 2, 1, 3};
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(qwen35_v_source_index(i, 2, 4, 1), want[i]);
  // Head size 3: whole heads move, entries within a head keep their order.
  EXPECT_EQ(qwen35_v_source_index(3 * 1 + 2, 2, 4, 3), 3u * 2 + 2);
  // Equal head counts: nothing moves.
  for (uint64_t i = 0; i < 8; ++i) EXPECT_EQ(qwen35_v_source_index(i, 4, 4, 2), i);
}

}  // namespace
}  // namespace tandem
