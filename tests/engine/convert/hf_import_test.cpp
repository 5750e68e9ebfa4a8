// Imports tiny synthetic Hugging Face directories (config.json + safetensors with random weights,
// written here) and reads the GGUF back: names, shapes, types, values, metadata, and Llama's q/k
// permutation against a naive reshape/swapaxes written independently below.
#include "convert/hf_import.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "gguf/gguf_reader.h"
#include "quant/half.h"
#include "quant/quant.h"
#include "st_test_util.h"
#include "tokenizer/vocab_gguf.h"

namespace tandem {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

struct hf_tensor {
  std::vector<uint64_t> shape;  // PyTorch order
  std::vector<float> values;
};

struct tiny_model {
  json config;
  std::map<std::string, hf_tensor> tensors;
};

// A small model of the given transformers type. qwen3 gets an explicit head_dim that differs from
// hidden/heads, so shapes that confuse the two are caught.
tiny_model make_tiny(const std::string& type, bool tied, uint32_t seed) {
  const uint64_t H = 64, L = 2, NH = 4, NKV = 2, F = 96, V = 100;
  const uint64_t HD = type == "qwen3" ? 32 : H / NH;
  tiny_model m;
  m.config = {{"model_type", type},
              {"hidden_size", H},
              {"num_hidden_layers", L},
              {"intermediate_size", F},
              {"num_attention_heads", NH},
              {"num_key_value_heads", NKV},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", 500000.0},
              {"max_position_embeddings", 4096},
              {"vocab_size", V},
              {"tie_word_embeddings", tied},
              {"hidden_act", "silu"},
              {"torch_dtype", "float32"},
              {"architectures", {"X"}}};
  if (type == "qwen3") {
    m.config["head_dim"] = HD;
    m.config["layer_types"] = {"full_attention", "full_attention"};
  }
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
    add(p + "self_attn.q_proj.weight", {NH * HD, H});
    add(p + "self_attn.k_proj.weight", {NKV * HD, H});
    add(p + "self_attn.v_proj.weight", {NKV * HD, H});
    add(p + "self_attn.o_proj.weight", {H, NH * HD});
    if (type == "qwen2") {
      add(p + "self_attn.q_proj.bias", {NH * HD});
      add(p + "self_attn.k_proj.bias", {NKV * HD});
      add(p + "self_attn.v_proj.bias", {NKV * HD});
    }
    if (type == "qwen3") {
      add(p + "self_attn.q_norm.weight", {HD});
      add(p + "self_attn.k_norm.weight", {HD});
    }
    add(p + "post_attention_layernorm.weight", {H});
    add(p + "mlp.gate_proj.weight", {F, H});
    add(p + "mlp.up_proj.weight", {F, H});
    add(p + "mlp.down_proj.weight", {H, F});
  }
  add("model.norm.weight", {H});
  if (!tied) add("lm_head.weight", {V, H});
  return m;
}

// Stores every tensor with `dtype` (F32 or BF16); BF16 rounds the model's values in place so the
// expected data is exactly what the file holds.
std::vector<uint8_t> encode(tiny_model& m, const std::vector<std::string>& names,
                            const std::string& dtype) {
  std::vector<test::st_entry> entries;
  for (const auto& name : names) {
    auto& t = m.tensors.at(name);
    if (dtype == "BF16") {
      std::vector<uint16_t> bits;
      for (auto& v : t.values) {
        bits.push_back(fp32_to_bf16(v));
        v = bf16_to_fp32(bits.back());
      }
      entries.push_back({name, dtype, t.shape, test::as_bytes(bits)});
    } else {
      entries.push_back({name, dtype, t.shape, test::as_bytes(t.values)});
    }
  }
  return test::make_safetensors(entries, {{"format", "pt"}});
}

void write_model(tiny_model& m, const fs::path& dir, const std::string& dtype = "F32") {
  fs::create_directories(dir);
  test::write_text(dir / "config.json", m.config.dump(2));
  std::vector<std::string> names;
  for (const auto& [name, t] : m.tensors) names.push_back(name);
  test::write_file(dir / "model.safetensors", encode(m, names, dtype));
}

// The HF name a GGUF name came from, by the table in the task (independent of the importer's).
std::string hf_name(const std::string& gguf) {
  static const std::map<std::string, std::string> stems = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  const size_t a = gguf.find('.'), b = gguf.find('.', a + 1);
  return "model.layers." + gguf.substr(a + 1, b - a - 1) + "." + stems.at(gguf.substr(b + 1));
}

// numpy: w.reshape(n_head, 2, hd/2, n_in).swapaxes(1, 2).reshape(w.shape), with the index
// arithmetic of each reshape spelled out.
std::vector<float> naive_permute(const std::vector<float>& w, uint64_t n_head, uint64_t n_in) {
  const uint64_t rows = w.size() / n_in, half = rows / n_head / 2;
  std::vector<float> out(w.size());
  for (uint64_t h = 0; h < n_head; ++h)
    for (uint64_t a = 0; a < 2; ++a)
      for (uint64_t b = 0; b < half; ++b) {
        const uint64_t src = (h * 2 + a) * half + b;  // index in (n_head, 2, half)
        const uint64_t dst = (h * half + b) * 2 + a;  // index in (n_head, half, 2)
        std::copy_n(w.begin() + src * n_in, n_in, out.begin() + dst * n_in);
      }
  return out;
}

std::vector<float> dequantized(const gguf_tensor& t) {
  std::vector<float> out(t.n_elements);
  const uint64_t n_in = t.dims[0], rows = t.n_elements / n_in;
  const uint64_t rb = *row_bytes(t.type, n_in);
  for (uint64_t r = 0; r < rows; ++r)
    dequantize_row(t.type, t.data + r * rb, out.data() + r * n_in, static_cast<int64_t>(n_in));
  return out;
}

// Quantizes and dequantizes rows of n_in values with the library's own row functions.
std::vector<float> roundtrip(ggml_type type, const std::vector<float>& v, uint64_t n_in) {
  const uint64_t rb = *row_bytes(type, n_in);
  std::vector<uint8_t> row(rb);
  std::vector<float> out(v.size());
  for (uint64_t r = 0; r < v.size() / n_in; ++r) {
    quantize_row(type, v.data() + r * n_in, row.data(), static_cast<int64_t>(n_in));
    dequantize_row(type, row.data(), out.data() + r * n_in, static_cast<int64_t>(n_in));
  }
  return out;
}

class hf_import : public test::scratch_dir_test {
 protected:
  result<import_summary> run(const fs::path& model_dir, ggml_type type,
                             const std::string& name = "") {
    import_options opt;
    opt.type = type;
    opt.name = name;
    opt.threads = 3;  // exercise the row split even on small machines
    return import_hf_model(model_dir.string(), out_.string(), opt);
  }

  // Checks every expected tensor's presence, order, shape, type and values against the model.
  void check_tensors(const gguf_file& f, const hf_config& cfg, tiny_model& m, ggml_type matrix_type,
                     float tol) {
    const auto specs = expected_tensors(*cfg.arch, cfg.hp);
    ASSERT_EQ(f.tensors().size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto& spec = specs[i];
      const gguf_tensor& t = f.tensors()[i];
      ASSERT_EQ(t.name, spec.name);
      ASSERT_EQ(t.n_dims, spec.shape.size()) << t.name;
      for (size_t d = 0; d < spec.shape.size(); ++d) EXPECT_EQ(t.dims[d], spec.shape[d]) << t.name;
      const bool one_d = spec.shape.size() == 1;
      EXPECT_EQ(t.type, one_d ? ggml_type::f32 : matrix_type) << t.name;
      std::vector<float> want = m.tensors.at(hf_name(t.name)).values;
      if (cfg.model_type == "llama" && t.name.ends_with("attn_q.weight"))
        want = naive_permute(want, cfg.hp.n_head, cfg.hp.n_embd);
      if (cfg.model_type == "llama" && t.name.ends_with("attn_k.weight"))
        want = naive_permute(want, cfg.hp.n_head_kv, cfg.hp.n_embd);
      const auto got = dequantized(t);
      ASSERT_EQ(got.size(), want.size()) << t.name;
      float max_err = 0;
      for (size_t k = 0; k < got.size(); ++k)
        max_err = std::max(max_err, std::fabs(got[k] - want[k]));
      EXPECT_LE(max_err, one_d ? 0.f : tol) << t.name;
      // Bit-exact against quantizing the expected rows here: the right rows reached the quantizer.
      if (!one_d) {
        EXPECT_EQ(got, roundtrip(t.type, want, t.dims[0])) << t.name;
      }
    }
  }

  fs::path out_;
  void SetUp() override {
    scratch_dir_test::SetUp();
    out_ = dir_ / "out.gguf";
  }
};

TEST_F(hf_import, qwen3_f32_is_exact_with_metadata) {
  auto m = make_tiny("qwen3", false, 1);
  write_model(m, dir_ / "Tiny-Qwen3");
  auto s = run(dir_ / "Tiny-Qwen3", ggml_type::f32);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->arch, "qwen3");
  EXPECT_FALSE(s->has_tokenizer);

  auto f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(*f->get_string("general.architecture"), "qwen3");
  EXPECT_EQ(*f->get_string("general.name"), "Tiny-Qwen3");
  EXPECT_EQ(*f->get_uint("general.file_type"), 0u);
  auto cfg = read_hf_config((dir_ / "Tiny-Qwen3" / "config.json").string());
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  auto hp = read_hparams(*cfg->arch, *f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  EXPECT_EQ(hp->n_vocab, 100u);
  EXPECT_EQ(hp->n_embd, 64u);
  EXPECT_EQ(hp->n_layer, 2u);
  EXPECT_EQ(hp->n_ff, 96u);
  EXPECT_EQ(hp->n_head, 4u);
  EXPECT_EQ(hp->n_head_kv, 2u);
  EXPECT_EQ(hp->head_dim, 32u);
  EXPECT_EQ(hp->rope_dim, 32u);
  EXPECT_EQ(hp->n_ctx_train, 4096u);
  EXPECT_FLOAT_EQ(hp->rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(hp->rope_theta, 500000.f);
  EXPECT_FALSE(hp->tied_output);
  check_tensors(*f, *cfg, m, ggml_type::f32, 0.f);
}

TEST_F(hf_import, qwen2_bf16_source_to_f16_keeps_1d_tensors_f32) {
  auto m = make_tiny("qwen2", false, 2);
  write_model(m, dir_ / "q2", "BF16");
  auto s = run(dir_ / "q2", ggml_type::f16, "custom name");
  ASSERT_TRUE(s.ok()) << s.message();
  auto f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(*f->get_string("general.name"), "custom name");
  EXPECT_EQ(*f->get_uint("general.file_type"), 1u);
  ASSERT_NE(f->find_tensor("blk.1.attn_k.bias"), nullptr);
  auto cfg = read_hf_config((dir_ / "q2" / "config.json").string());
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  // BF16 values have 8 significant bits, F16 has 11: exact, except below F16's normal range
  // (6.1e-5), where F16's fixed step 2^-24 rounds.
  check_tensors(*f, *cfg, m, ggml_type::f16, 0x1p-25f);
}

TEST_F(hf_import, llama_q_and_k_rows_are_permuted) {
  auto m = make_tiny("llama", false, 3);
  write_model(m, dir_ / "llama");
  auto s = run(dir_ / "llama", ggml_type::f32);
  ASSERT_TRUE(s.ok()) << s.message();
  auto f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok()) << f.message();
  auto cfg = read_hf_config((dir_ / "llama" / "config.json").string());
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  check_tensors(*f, *cfg, m, ggml_type::f32, 0.f);
  // The permutation moved something: q differs from the HF layout.
  const auto q = dequantized(*f->find_tensor("blk.0.attn_q.weight"));
  EXPECT_NE(q, m.tensors.at("model.layers.0.self_attn.q_proj.weight").values);
}

// What the permutation is for: q·k after llama.cpp's adjacent-pair RoPE on the permuted weights
// equals q·k after HF's rotate_half RoPE on the original ones.
TEST_F(hf_import, llama_permutation_makes_normal_rope_match_rotate_half) {
  auto m = make_tiny("llama", false, 4);
  write_model(m, dir_ / "llama");
  ASSERT_TRUE(run(dir_ / "llama", ggml_type::f32).ok());
  auto f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok()) << f.message();
  const uint64_t H = 64, HD = 16, NH = 4, NKV = 2;
  const double theta = 500000.0;
  std::mt19937 rng(9);
  const auto x = test::random_floats(H, rng);
  auto matvec = [&](const std::vector<float>& w, uint64_t rows) {
    std::vector<double> y(rows);
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t c = 0; c < H; ++c) y[r] += double(w[r * H + c]) * x[c];
    return y;
  };
  auto rope = [&](std::vector<double> v, uint64_t head, double pos, bool neox) {
    double* h = v.data() + head * HD;
    std::vector<double> o(h, h + HD);
    for (uint64_t i = 0; i < HD / 2; ++i) {
      const double a = pos * std::pow(theta, -2.0 * double(i) / double(HD)), c = std::cos(a),
                   s = std::sin(a);
      const uint64_t i0 = neox ? i : 2 * i, i1 = neox ? i + HD / 2 : 2 * i + 1;
      o[i0] = h[i0] * c - h[i1] * s;
      o[i1] = h[i1] * c + h[i0] * s;
    }
    return o;
  };
  const auto& hq = m.tensors.at("model.layers.1.self_attn.q_proj.weight").values;
  const auto& hk = m.tensors.at("model.layers.1.self_attn.k_proj.weight").values;
  const auto gq = dequantized(*f->find_tensor("blk.1.attn_q.weight"));
  const auto gk = dequantized(*f->find_tensor("blk.1.attn_k.weight"));
  for (uint64_t head = 0; head < NH; ++head) {
    const uint64_t kv = head / (NH / NKV);
    const auto q1 = rope(matvec(hq, NH * HD), head, 7, true),
               k1 = rope(matvec(hk, NKV * HD), kv, 3, true);
    const auto q2 = rope(matvec(gq, NH * HD), head, 7, false),
               k2 = rope(matvec(gk, NKV * HD), kv, 3, false);
    double s1 = 0, s2 = 0;
    for (uint64_t i = 0; i < HD; ++i) {
      s1 += q1[i] * k1[i];
      s2 += q2[i] * k2[i];
    }
    EXPECT_NEAR(s1, s2, 1e-9 * (1 + std::fabs(s1))) << "head " << head;
  }
}

TEST_F(hf_import, tied_embeddings_have_no_output_tensor) {
  auto m = make_tiny("qwen3", true, 5);
  write_model(m, dir_ / "tied");
  auto s = run(dir_ / "tied", ggml_type::f32);
  ASSERT_TRUE(s.ok()) << s.message();
  auto f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  auto cfg = read_hf_config((dir_ / "tied" / "config.json").string());
  ASSERT_TRUE(cfg.ok());
  check_tensors(*f, *cfg, m, ggml_type::f32, 0.f);

  // A checkpoint that stores lm_head although the config ties it: HF ignores the copy, so do we.
  m.tensors["lm_head.weight"] = m.tensors.at("model.embed_tokens.weight");
  write_model(m, dir_ / "tied2");
  s = run(dir_ / "tied2", ggml_type::f32);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(s->notes.empty());
  f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
}

TEST_F(hf_import, q8_0_quantizes_matrices_within_tolerance) {
  auto m = make_tiny("qwen3", false, 6);
  write_model(m, dir_ / "q8");
  auto s = run(dir_ / "q8", ggml_type::q8_0);
  ASSERT_TRUE(s.ok()) << s.message();
  auto f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(*f->get_uint("general.file_type"), 7u);
  auto cfg = read_hf_config((dir_ / "q8" / "config.json").string());
  ASSERT_TRUE(cfg.ok());
  // |w| <= 1, so the Q8_0 step is at most about 1/127; the scale search may trade the largest
  // error of a block for a smaller total, so allow one full step.
  check_tensors(*f, *cfg, m, ggml_type::q8_0, 1.f / 127);
}

TEST_F(hf_import, k_quant_falls_back_to_f16_for_short_rows) {
  auto m = make_tiny("qwen3", false, 7);
  write_model(m, dir_ / "k");
  auto s = run(dir_ / "k", ggml_type::q4_k);  // rows of 64 or 96: not multiples of 256
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(s->notes.empty());
  auto f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->find_tensor("blk.0.ffn_down.weight")->type, ggml_type::f16);
  EXPECT_EQ(f->find_tensor("blk.0.attn_norm.weight")->type, ggml_type::f32);
}

TEST_F(hf_import, sharded_checkpoint_matches_single_file) {
  auto m = make_tiny("qwen2", false, 8);
  write_model(m, dir_ / "single");
  ASSERT_TRUE(run(dir_ / "single", ggml_type::f16).ok());
  fs::rename(out_, dir_ / "single.gguf");

  const fs::path sharded = dir_ / "sharded";
  fs::create_directories(sharded);
  test::write_text(sharded / "config.json", m.config.dump());
  std::vector<std::string> part1, part2;
  for (const auto& [name, t] : m.tensors)
    (name.find("layers.1.") != std::string::npos ? part2 : part1).push_back(name);
  test::write_file(sharded / "model-00001-of-00002.safetensors", encode(m, part1, "F32"));
  test::write_file(sharded / "model-00002-of-00002.safetensors", encode(m, part2, "F32"));
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  for (const auto& n : part1) index["weight_map"][n] = "model-00001-of-00002.safetensors";
  for (const auto& n : part2) index["weight_map"][n] = "model-00002-of-00002.safetensors";
  test::write_text(sharded / "model.safetensors.index.json", index.dump());
  auto s = run(sharded, ggml_type::f16, "single");
  ASSERT_TRUE(s.ok()) << s.message();

  auto a = gguf_file::open((dir_ / "single.gguf").string());
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

// A minimal Qwen2-style byte-level BPE tokenizer.json (the split regex must be Qwen's exactly).
json tiny_tokenizer_json(int extra_id) {
  const std::string regex =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}};
  return {
      {"version", "1.0"},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", regex}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", false},
           {"use_regex", false}}}}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "ab c"}}, {"byte_fallback", false}}},
      {"added_tokens", {{{"id", extra_id}, {"content", "<|endoftext|>"}, {"special", true}}}}};
}

TEST_F(hf_import, tokenizer_is_embedded_and_padded_to_vocab_size) {
  auto m = make_tiny("qwen3", false, 12);
  const fs::path d = dir_ / "tok";
  write_model(m, d);
  test::write_text(d / "tokenizer.json", tiny_tokenizer_json(5).dump());
  test::write_text(
      d / "tokenizer_config.json",
      json{{"eos_token", "<|endoftext|>"}, {"chat_template", "{{ messages }}"}}.dump());
  auto s = run(d, ggml_type::f32);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(s->has_tokenizer);
  auto f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok()) << f.message();
  auto v = vocab_from_gguf(*f);
  ASSERT_TRUE(v.ok()) << v.message();
  ASSERT_EQ(v->tokens.size(), 100u);  // config.json's vocab_size: one token per embedding row
  EXPECT_EQ(v->tokens[4], "abc");
  EXPECT_EQ(v->tokens[5], "<|endoftext|>");
  EXPECT_EQ(v->types[5], token_type::control);
  EXPECT_EQ(v->tokens[99], "[PAD99]");
  EXPECT_EQ(v->types[99], token_type::unused);
  EXPECT_EQ(v->eos_id, 5);
  EXPECT_EQ(v->pre, "qwen2");
  EXPECT_EQ(v->merges, (std::vector<std::string>{"a b", "ab c"}));
  EXPECT_EQ(v->chat_template, "{{ messages }}");
}

TEST_F(hf_import, tokenizer_errors_and_opt_out) {
  auto m = make_tiny("qwen3", false, 13);
  const fs::path d = dir_ / "tok";
  write_model(m, d);
  test::write_text(d / "tokenizer.json", tiny_tokenizer_json(150).dump());
  auto s = run(d, ggml_type::f32);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("151 tokens but config.json's vocab_size is 100"), std::string::npos)
      << s.message();

  auto bad = tiny_tokenizer_json(5);
  bad["model"]["byte_fallback"] = true;  // SentencePiece-style: not supported by the tokenizer
  test::write_text(d / "tokenizer.json", bad.dump());
  s = run(d, ggml_type::f32);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--no-tokenizer"), std::string::npos) << s.message();

  import_options opt;
  opt.type = ggml_type::f32;
  opt.tokenizer = false;
  s = import_hf_model(d.string(), out_.string(), opt);
  ASSERT_TRUE(s.ok()) << s.message();
  auto f = gguf_file::open(out_.string());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->find("tokenizer.ggml.tokens"), nullptr);
}

// Runs an import that must fail with `needle` in the message and leave no output behind.
void expect_import_error(const fs::path& dir, const fs::path& out, const std::string& needle) {
  import_options opt;
  opt.type = ggml_type::f16;
  auto s = import_hf_model(dir.string(), out.string(), opt);
  ASSERT_FALSE(s.ok()) << "expected: " << needle;
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(hf_import, config_errors_name_the_field) {
  auto m = make_tiny("qwen3", false, 10);
  const fs::path d = dir_ / "bad";
  auto with = [&](const std::function<void(json&)>& edit) {
    tiny_model c = m;
    edit(c.config);
    write_model(c, d);
  };
  with([](json& j) { j["model_type"] = "gpt2"; });
  expect_import_error(d, out_,
                      "model_type \"gpt2\" is not supported (supported: llama, qwen2, qwen3, qwen3_5_text, "
                      "qwen3_5, qwen3_moe, qwen3_5_moe_text, qwen3_5_moe)");
  with([](json& j) { j.erase("hidden_size"); });
  expect_import_error(d, out_, "missing field hidden_size");
  with([](json& j) { j["num_attention_heads"] = "four"; });
  expect_import_error(d, out_, "field num_attention_heads must be a positive integer");
  with([](json& j) { j["num_key_value_heads"] = 3; });
  expect_import_error(d, out_, "not a multiple of num_key_value_heads");
  with([](json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
  expect_import_error(d, out_, "rope_scaling.rope_type is \"yarn\"");
  with([](json& j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; });
  expect_import_error(d, out_, "rope_scaling.type is \"linear\"");
  with([](json& j) { j["attention_bias"] = true; });
  expect_import_error(d, out_, "attention_bias is true");
  with([](json& j) { j["use_sliding_window"] = true; });
  expect_import_error(d, out_, "use_sliding_window is true");
  with([](json& j) { j["layer_types"] = {"full_attention", "sliding_attention"}; });
  expect_import_error(d, out_, "layer_types[1] is \"sliding_attention\"");
  with([](json& j) { j["hidden_act"] = "gelu"; });
  expect_import_error(d, out_, "hidden_act");
  test::write_text(d / "config.json", "{not json");
  expect_import_error(d, out_, "config.json: not valid JSON");
  fs::remove(d / "config.json");
  expect_import_error(d, out_, "config.json: cannot open");
}

TEST_F(hf_import, tensor_errors_name_the_tensor) {
  const fs::path d = dir_ / "bad";
  {
    auto m = make_tiny("qwen3", false, 11);
    m.tensors.erase("model.layers.1.mlp.up_proj.weight");
    write_model(m, d);
    expect_import_error(d, out_, "missing tensor for blk.1.ffn_up.weight");
  }
  {
    auto m = make_tiny("qwen3", false, 11);
    m.tensors["model.layers.0.mlp.gate_proj.weight"].shape = {64, 96};  // transposed
    write_model(m, d);
    expect_import_error(d, out_,
                        "\"model.layers.0.mlp.gate_proj.weight\" has shape [64,96] but config.json "
                        "implies [96,64]");
  }
  {
    auto m = make_tiny("qwen3", false, 11);
    m.tensors["model.layers.2.input_layernorm.weight"] = m.tensors.at("model.norm.weight");
    write_model(m, d);
    expect_import_error(d, out_, "blk.2.attn_norm.weight) is not expected for qwen3 with 2 layers");
  }
  {
    auto m = make_tiny("qwen3", false, 11);
    m.tensors["model.layers.0.self_attn.q_proj.bias"] = {{128}, std::vector<float>(128, 0.f)};
    write_model(m, d);
    expect_import_error(d, out_, "blk.0.attn_q.bias) is not expected");
  }
  {
    auto m = make_tiny("qwen3", false, 11);
    m.tensors["vision_tower.proj.weight"] = {{4}, std::vector<float>(4, 0.f)};
    write_model(m, d);
    expect_import_error(d, out_, "\"vision_tower.proj.weight\" is not part of a qwen3 model");
  }
  {
    auto m = make_tiny("llama", false, 11);
    m.config["tie_word_embeddings"] = false;
    m.tensors.erase("lm_head.weight");
    write_model(m, d);
    expect_import_error(d, out_, "missing tensor for output.weight");
  }
  {
    auto m = make_tiny("qwen3", false, 11);
    write_model(m, d);
    import_options opt;
    auto s = import_hf_model(d.string(), (d / "model.safetensors").string(), opt);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("is the input file"), std::string::npos) << s.message();
    fs::remove(d / "model.safetensors");
    expect_import_error(d, out_, "no *.safetensors files");
  }
}

TEST(hf_config, defaults_and_newer_rope_parameters) {
  auto c = parse_hf_config(
      R"({"model_type":"llama","vocab_size":10,"hidden_size":64,"num_hidden_layers":1,
      "intermediate_size":128,"num_attention_heads":8,"max_position_embeddings":2048,
      "num_key_value_heads":null,"rope_scaling":null,
      "rope_parameters":{"rope_type":"default","rope_theta":1000000.0}})",
      "config.json");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->hp.n_head_kv, 8u);
  EXPECT_EQ(c->hp.head_dim, 8u);
  EXPECT_EQ(c->hp.rope_dim, 8u);
  EXPECT_FLOAT_EQ(c->hp.rope_theta, 1e6f);
  EXPECT_FLOAT_EQ(c->hp.rms_eps, 1e-6f);
  EXPECT_FALSE(c->hp.tied_output);
  EXPECT_EQ(c->arch->flags.rope, rope_style::normal);
}

TEST(hf_names, maps_llama_cpp_names) {
  EXPECT_EQ(map_hf_tensor_name("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(map_hf_tensor_name("model.layers.12.self_attn.k_norm.weight"),
            "blk.12.attn_k_norm.weight");
  EXPECT_EQ(map_hf_tensor_name("model.layers.0.mlp.down_proj.weight"), "blk.0.ffn_down.weight");
  EXPECT_EQ(map_hf_tensor_name("model.layers.3.post_attention_layernorm.weight"),
            "blk.3.ffn_norm.weight");
  EXPECT_EQ(map_hf_tensor_name("lm_head.weight"), "output.weight");
  EXPECT_EQ(map_hf_tensor_name("model.layers.01.mlp.up_proj.weight"), std::nullopt);
  EXPECT_EQ(map_hf_tensor_name("model.layers.x.mlp.up_proj.weight"), std::nullopt);
  EXPECT_EQ(map_hf_tensor_name("model.layers.1.mlp.up_proj.bias"), std::nullopt);
  EXPECT_EQ(llama_qk_source_row(0, 8), 0u);
  EXPECT_EQ(llama_qk_source_row(1, 8), 4u);
  EXPECT_EQ(llama_qk_source_row(2, 8), 1u);
  EXPECT_EQ(llama_qk_source_row(9, 8), 12u);
}

}  // namespace
}  // namespace tandem
