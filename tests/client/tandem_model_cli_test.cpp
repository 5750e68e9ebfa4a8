// Runs the built tandem-model binary on generated tiny models: info text and JSON, make's exact
// file size and tensor types per file type, quantize's mixture, determinism, and bad input.
// Expected types and sizes are computed here from the shapes, independently of the tool's code.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gguf/gguf_reader.h"
#include "quant/quant.h"
#include "tandem_model_harness.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using tandem::test::has;
using tandem::test::run_result;
using tandem::test::slurp;
using TandemModel = tandem::test::tandem_model_test;

// Block geometry from ggml-common.h, restated so the test does not trust the library's table.
struct block_geom {
  uint64_t elems, bytes;
};
const std::map<std::string, block_geom> k_blocks = {
    {"F32", {1, 4}},     {"F16", {1, 2}},     {"BF16", {1, 2}},    {"Q8_0", {32, 34}},
    {"Q4_0", {32, 18}},  {"Q4_1", {32, 20}},  {"Q5_0", {32, 22}},  {"Q5_1", {32, 24}},
    {"Q4_K", {256, 144}}, {"Q5_K", {256, 176}}, {"Q6_K", {256, 210}},
};

int layer_of(const std::string& name) {
  return name.rfind("blk.", 0) == 0 ? std::stoi(name.substr(4)) : -1;
}

// llama.cpp's rule for a dense model, written out per file type (see llama-quant.cpp).
std::string expected_type(const std::string& ftype, const std::string& name, uint64_t row,
                          uint32_t n_dims, int n_layer, bool has_output) {
  if (n_dims < 2 || has(name, "_norm.weight") || !has(name, "weight")) return "F32";
  if (ftype == "F32" || ftype == "F16" || ftype == "BF16") return ftype;
  const std::map<std::string, std::string> base = {
      {"Q8_0", "Q8_0"}, {"Q6_K", "Q6_K"}, {"Q4_0", "Q4_0"},   {"Q4_1", "Q4_1"},   {"Q5_0", "Q5_0"},
      {"Q5_1", "Q5_1"}, {"Q4_K_M", "Q4_K"}, {"Q4_K_S", "Q4_K"}, {"Q5_K_M", "Q5_K"}, {"Q5_K_S", "Q5_K"}};
  std::string t = base.at(ftype);
  const int i = layer_of(name);
  auto more_bits = [&](int l) { return l < n_layer / 8 || l >= 7 * n_layer / 8 || (l - n_layer / 8) % 3 == 2; };
  const bool head = name == "output.weight" || (!has_output && name == "token_embd.weight");
  if (head) {
    if (row % k_blocks.at(t).elems != 0) t = "Q8_0";
    else if (t != "Q8_0") t = "Q6_K";
  } else if (has(name, "attn_v.weight") || has(name, "ffn_down")) {
    if ((ftype == "Q4_K_M" || ftype == "Q5_K_M") && more_bits(i)) t = "Q6_K";
    if (ftype == "Q4_K_S" && has(name, "attn_v") && i < 4) t = "Q5_K";
    if (ftype == "Q4_K_S" && has(name, "ffn_down") && i < n_layer / 8) t = "Q5_K";
  }
  if (row % k_blocks.at(t).elems != 0) {
    t = t == "Q4_K" ? "Q5_0" : t == "Q5_K" ? "Q5_1" : t == "Q6_K" ? "Q8_0" : "F16";
    if (row % k_blocks.at(t).elems != 0) t = "F16";
  }
  return t;
}

// Checks every tensor's type against the rule, its offset against the running aligned sum, and
// the file size against header + sum of padded tensor bytes.
void check_layout(const std::string& file, const std::string& ftype, int n_layer) {
  auto f = tandem::gguf_file::open(file);
  ASSERT_TRUE(f.ok()) << f.message();
  const bool has_output = f->find_tensor("output.weight") != nullptr;
  uint64_t offset = 0;
  for (const auto& t : f->tensors()) {
    const std::string type(tandem::type_name(t.type));
    EXPECT_EQ(type, expected_type(ftype, t.name, t.dims[0], t.n_dims, n_layer, has_output))
        << ftype << " " << t.name;
    const block_geom g = k_blocks.at(type);
    uint64_t rows = 1;
    for (uint32_t d = 1; d < t.n_dims; ++d) rows *= t.dims[d];
    const uint64_t bytes = t.dims[0] / g.elems * g.bytes * rows;
    EXPECT_EQ(t.n_bytes, bytes) << t.name;
    EXPECT_EQ(t.offset, offset) << t.name;
    offset += (bytes + 31) / 32 * 32;
  }
  EXPECT_EQ(f->file_size(), f->data_offset() + offset) << ftype;
}

const std::map<std::string, uint32_t> k_ftype_ids = {
    {"F32", 0}, {"F16", 1}, {"Q4_0", 2}, {"Q4_1", 3}, {"Q8_0", 7}, {"Q5_0", 8}, {"Q5_1", 9},
    {"Q4_K_S", 14}, {"Q4_K_M", 15}, {"Q5_K_S", 16}, {"Q5_K_M", 17}, {"Q6_K", 18}, {"BF16", 32}};

TEST_F(TandemModel, InfoPrintsArchitectureTokenizerAndTensors) {
  const std::string m = make("tiny.gguf", "--preset tiny");
  const run_result brief = run("info " + m);
  ASSERT_EQ(brief.code, 0) << brief.err;
  EXPECT_FALSE(has(brief.out, "blk.1.ffn_down.weight")) << brief.out;  // the table only with --tensors
  EXPECT_TRUE(has(brief.out, "bytes by type")) << brief.out;
  const run_result r = run("info --tensors " + m);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "architecture  qwen3")) << r.out;
  EXPECT_TRUE(has(r.out, "file type     MOSTLY_F16 (1)")) << r.out;
  EXPECT_TRUE(has(r.out, "qwen3.block_count")) << r.out;
  EXPECT_TRUE(has(r.out, "model gpt2, pre qwen2, 512 tokens, 8 merges")) << r.out;
  EXPECT_TRUE(has(r.out, "<|endoftext|>")) << r.out;
  EXPECT_TRUE(has(r.out, "<|im_end|>")) << r.out;
  EXPECT_TRUE(has(r.out, "chat template: yes")) << r.out;
  EXPECT_TRUE(has(r.out, "blk.1.ffn_down.weight")) << r.out;
  EXPECT_TRUE(has(r.out, "512 x 256")) << r.out;  // ffn_down: {n_ff, n_embd}
  EXPECT_TRUE(has(r.out, "bytes by type")) << r.out;
}

TEST_F(TandemModel, InfoJsonMatchesTheShape) {
  const std::string m = make("tiny.gguf", "--preset tiny --type Q8_0");
  const run_result r = run("info --json " + m);
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["architecture"], "qwen3");
  EXPECT_EQ(j["file_type"]["id"], 7);
  EXPECT_EQ(j["file_type"]["name"], "MOSTLY_Q8_0");
  EXPECT_EQ(j["hparams"]["qwen3.block_count"], 2);
  EXPECT_EQ(j["hparams"]["qwen3.embedding_length"], 256);
  EXPECT_EQ(j["tokenizer"]["n_tokens"], 512);
  EXPECT_EQ(j["tokenizer"]["eos_token"], "<|im_end|>");
  EXPECT_EQ(j["tokenizer"]["has_chat_template"], true);
  // tiny: vocab 512, embd 256, 2 layers, ff 512, 4 q heads / 2 kv heads of 64, untied.
  const uint64_t per_layer = 256 + 256 * 256 + 2 * 256 * 128 + 2 * 64 + 256 * 256 + 256 + 3 * 256 * 512;
  const uint64_t params = 2 * 512 * 256 + 2 * per_layer + 256;
  EXPECT_EQ(j["n_params"], params);
  EXPECT_EQ(j["tensors"].size(), 25u);
  uint64_t by_type = 0, by_tensor = 0;
  for (const auto& b : j["bytes_by_type"]) by_type += b["bytes"].get<uint64_t>();
  for (const auto& t : j["tensors"]) by_tensor += t["bytes"].get<uint64_t>();
  EXPECT_EQ(by_type, by_tensor);
  EXPECT_EQ(j["file_size"], fs::file_size(m));
}

TEST_F(TandemModel, MakeWritesExactSizesAndTypesForEveryFileType) {
  for (const auto& [ftype, id] : k_ftype_ids) {
    const std::string m = make(ftype + ".gguf", "--preset tiny --n-layer 8 --type " + ftype);
    check_layout(m, ftype, 8);
    auto f = tandem::gguf_file::open(m);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(*f->get_uint("general.file_type"), id) << ftype;
  }
}

TEST_F(TandemModel, MakeFallsBackForRowsNotMultipleOf256) {
  // n_embd 320 = 10 * 32: K-quant rows of 320 fall back (Q4_K -> Q5_0, Q6_K -> Q8_0).
  const std::string m = path("odd.gguf");
  const run_result r = run("make --preset tiny --n-embd 320 --n-head 5 --n-head-kv 1 --type Q4_K_M -o " + m);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "not a multiple of the block size")) << r.err;
  check_layout(m, "Q4_K_M", 2);
  auto f = tandem::gguf_file::open(m);
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.weight")->type, tandem::ggml_type::q5_0);
  EXPECT_EQ(f->find_tensor("output.weight")->type, tandem::ggml_type::q8_0);
  EXPECT_EQ(f->find_tensor("blk.1.ffn_down.weight")->type, tandem::ggml_type::q6_k);  // row 512
}

TEST_F(TandemModel, TiedAndOtherArchitectures) {
  const std::string tied = make("tied.gguf", "--preset tiny --tied --type Q4_K_M");
  check_layout(tied, "Q4_K_M", 2);
  auto f = tandem::gguf_file::open(tied);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("token_embd.weight")->type, tandem::ggml_type::q6_k);

  const std::string llama = make("llama.gguf", "--preset llama-tiny --type Q6_K");
  check_layout(llama, "Q6_K", 2);
  auto l = tandem::gguf_file::open(llama);
  EXPECT_EQ(*l->get_string("general.architecture"), "llama");
  EXPECT_EQ(l->find_tensor("blk.0.attn_q_norm.weight"), nullptr);

  // qwen2's q/k/v biases stay F32; shrunk so the test stays fast.
  const std::string q2 = make("qwen2.gguf", "--preset qwen2-0.5b --n-vocab 512 --n-embd 256 "
                                            "--n-layer 2 --n-ff 512 --n-head 4 --type Q4_K_M");
  check_layout(q2, "Q4_K_M", 2);
  auto q = tandem::gguf_file::open(q2);
  ASSERT_NE(q->find_tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(q->find_tensor("blk.0.attn_q.bias")->type, tandem::ggml_type::f32);
}

TEST_F(TandemModel, MakeIsDeterministicPerSeedAndThreadCount) {
  const std::string a = make("a.gguf", "--preset tiny --seed 7 --type Q4_K_M --threads 1");
  const std::string b = make("b.gguf", "--preset tiny --seed 7 --type Q4_K_M --threads 2");
  const std::string c = make("c.gguf", "--preset tiny --seed 8 --type Q4_K_M");
  EXPECT_EQ(slurp(a), slurp(b));
  EXPECT_NE(slurp(a), slurp(c));
}

// --row-pool: the first rows are the ones make draws anyway, every other row copies one of them,
// and the copies are spread over the pool rather than repeating it in order.
TEST_F(TandemModel, MakeRowPoolCopiesDrawnRows) {
  const std::string full = make("full.gguf", "--preset tiny --seed 5 --type Q8_0");
  const std::string pooled = make("pooled.gguf", "--preset tiny --seed 5 --type Q8_0 --row-pool 3");
  EXPECT_EQ(slurp(full), slurp(make("zero.gguf", "--preset tiny --seed 5 --type Q8_0 --row-pool 0")));
  auto f = tandem::gguf_file::open(full);
  auto p = tandem::gguf_file::open(pooled);
  ASSERT_TRUE(f.ok() && p.ok());
  const tandem::gguf_tensor* tf = f->find_tensor("blk.0.ffn_up.weight");
  const tandem::gguf_tensor* tp = p->find_tensor("blk.0.ffn_up.weight");
  ASSERT_TRUE(tf && tp);
  const uint64_t rows = tp->n_elements / tp->dims[0], rb = tp->n_bytes / rows;
  ASSERT_GT(rows, 6u);
  auto row = [rb](const tandem::gguf_tensor* t, uint64_t r) {
    return std::string(reinterpret_cast<const char*>(t->data) + r * rb, rb);
  };
  std::set<std::string> pool, seen_after;
  for (uint64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(row(tp, r), row(tf, r)) << "row " << r;
    pool.insert(row(tp, r));
  }
  ASSERT_EQ(pool.size(), 3u);
  for (uint64_t r = 3; r < rows; ++r) {
    ASSERT_TRUE(pool.count(row(tp, r))) << "row " << r << " is not a pool row";
    seen_after.insert(row(tp, r));
  }
  EXPECT_EQ(seen_after.size(), 3u);
  EXPECT_NE(row(tp, 5), row(tf, 5));
  EXPECT_EQ(tp->n_bytes, tf->n_bytes);
}

TEST_F(TandemModel, QuantizeFollowsTheMixtureAndKeepsMetadata) {
  const std::string src = make("f32.gguf", "--preset tiny --n-layer 8 --type F32 --seed 3");
  const std::string out = path("q4km.gguf");
  run_result r = run("quantize -q " + src + " " + out + " Q4_K_M");
  ASSERT_EQ(r.code, 0) << r.err;
  check_layout(out, "Q4_K_M", 8);
  auto in = tandem::gguf_file::open(src);
  auto q = tandem::gguf_file::open(out);
  EXPECT_EQ(*q->get_uint("general.file_type"), 15u);
  EXPECT_EQ(*q->get_string("general.name"), *in->get_string("general.name"));
  EXPECT_EQ(q->get_string_array("tokenizer.ggml.tokens")->size(), 512u);
  EXPECT_EQ(q->metadata().size(), in->metadata().size() + (in->find("general.quantization_version") ? 0 : 1));
  // Quantizing the F32 model gives the very bytes make writes for Q4_K_M with that seed.
  const std::string direct = make("direct.gguf", "--preset tiny --n-layer 8 --type Q4_K_M --seed 3");
  EXPECT_EQ(slurp(out), slurp(direct));

  // Already-quantized tensors need --allow-requantize.
  r = run("quantize -q " + out + " " + path("q8.gguf") + " Q8_0");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "--allow-requantize")) << r.err;
  r = run("quantize -q --allow-requantize " + out + " " + path("q8.gguf") + " Q8_0");
  ASSERT_EQ(r.code, 0) << r.err;
  check_layout(path("q8.gguf"), "Q8_0", 8);

  // Dequantizing needs no flag: to F16, and to F32 the values exactly as the library decodes them.
  for (const char* ftype : {"F16", "F32", "BF16"}) {
    const std::string deq = path(std::string("deq_") + ftype + ".gguf");
    r = run("quantize -q " + out + " " + deq + " " + ftype);
    ASSERT_EQ(r.code, 0) << ftype << ": " << r.err;
    check_layout(deq, ftype, 8);
  }
  auto f32 = tandem::gguf_file::open(path("deq_F32.gguf"));
  ASSERT_TRUE(f32.ok());
  const tandem::gguf_tensor* qt = q->find_tensor("blk.0.ffn_up.weight");
  const tandem::gguf_tensor* ft = f32->find_tensor("blk.0.ffn_up.weight");
  ASSERT_TRUE(qt && ft);
  std::vector<float> want(qt->n_elements);
  tandem::dequantize_row(qt->type, qt->data, want.data(), int64_t(qt->n_elements));
  EXPECT_EQ(std::memcmp(want.data(), ft->data, want.size() * sizeof(float)), 0);
}

TEST_F(TandemModel, BadInputFailsWithAMessage) {
  run_result r = run("info " + path("missing.gguf"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "missing.gguf")) << r.err;

  std::ofstream(path("garbage.gguf")) << "this is not a gguf file at all";
  r = run("info " + path("garbage.gguf"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "tandem-model: error: ")) << r.err;

  const std::string good = make("good.gguf", "--preset tiny");
  const std::string whole = slurp(good);
  std::ofstream(path("cut.gguf"), std::ios::binary) << whole.substr(0, whole.size() / 2);
  r = run("info " + path("cut.gguf"));
  EXPECT_EQ(r.code, 1);
  EXPECT_FALSE(r.err.empty());
  r = run("quantize " + path("cut.gguf") + " " + path("x.gguf") + " Q8_0");
  EXPECT_EQ(r.code, 1);

  r = run("make --preset nonesuch -o " + path("x.gguf"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "unknown preset 'nonesuch'")) << r.err;
  r = run("make --preset tiny --type Q9_9 -o " + path("x.gguf"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "unknown type 'Q9_9'")) << r.err;
  r = run("quantize " + good + " " + path("x.gguf") + " Q9_9");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "unknown type")) << r.err;
  r = run("quantize " + good + " " + good + " Q8_0");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "is the input file")) << r.err;
  r = run("make --preset tiny --n-vocab 100 -o " + path("x.gguf"));
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "at least")) << r.err;
  r = run("make --preset tiny --n-head 5 -o " + path("x.gguf"));
  EXPECT_EQ(r.code, 1);
  EXPECT_FALSE(fs::exists(path("x.gguf")));

  r = run("");
  EXPECT_EQ(r.code, 2);
  r = run("info");
  EXPECT_EQ(r.code, 2);
}

std::vector<std::string> tokens_of(const std::string& file) {
  auto f = tandem::gguf_file::open(file);
  EXPECT_TRUE(f.ok()) << f.message();
  auto t = f->get_string_array("tokenizer.ggml.tokens");
  EXPECT_TRUE(t.ok()) << t.message();
  return t.ok() ? *t : std::vector<std::string>{};
}

// With Qwen3's real tokenizer.json: the vocabulary, ids and template come from it, and the
// embedded byte vocabulary agrees with it on the 256 byte tokens (GPT-2 order).
TEST_F(TandemModel, MakeEmbedsAHuggingFaceTokenizer) {
  const fs::path data = fs::path(TANDEM_SOURCE_DIR) / "tests" / "data" / "qwen3-tokenizer";  // shipped
  if (!fs::exists(data / "tokenizer.json.gz")) GTEST_SKIP() << "no " << data.string();
  fs::create_directory(dir_ / "qwen3");
  fs::copy_file(data / "tokenizer_config.json", dir_ / "qwen3" / "tokenizer_config.json");
  const std::string json_path = (dir_ / "qwen3" / "tokenizer.json").string();
  ASSERT_EQ(std::system(("gunzip -c " + (data / "tokenizer.json.gz").string() + " > " + json_path).c_str()), 0);

  const std::string m = path("tok.gguf");
  const run_result r = run("make --preset tiny --tokenizer " + json_path + " -o " + m);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "n_vocab raised from 512")) << r.err;
  const auto real = tokens_of(m);
  ASSERT_GT(real.size(), 151643u);
  EXPECT_EQ(real[151643], "<|endoftext|>");
  EXPECT_EQ(real[151645], "<|im_end|>");
  auto f = tandem::gguf_file::open(m);
  EXPECT_EQ(f->find_tensor("token_embd.weight")->dims[1], real.size());
  EXPECT_EQ(*f->get_uint("tokenizer.ggml.eos_token_id"), 151645u);
  EXPECT_TRUE(f->find("tokenizer.chat_template"));

  const auto embedded = tokens_of(make("tiny.gguf", "--preset tiny"));
  ASSERT_EQ(embedded.size(), 512u);
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(embedded[i], real[i]) << i;
  EXPECT_EQ(embedded[511], "[PAD511]");

  const run_result small = run("make --preset tiny --n-vocab 600 --tokenizer " + json_path + " -o " + path("x.gguf"));
  EXPECT_EQ(small.code, 1);
  EXPECT_TRUE(has(small.err, "smaller than the tokenizer")) << small.err;
}

// Asking for a GPU that this build or machine lacks is a clear error, not a silent CPU run.
// (With a GPU present, the CUDA tests under tests/engine/backend/cuda cover the real path.)
TEST_F(TandemModel, RunOnAMissingGpuIsAnError) {
  const std::string m = make("gpu.gguf", "--preset tiny");
  const run_result r = run("run -m " + m + " -p hello -n 2 --gpu 1000");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "GPU 1000 requested")) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// A split over GPUs that are not there fails before any work, naming what is missing (a CPU
// build: no CUDA backend; a CUDA build: the device id), as do bad --gpus / --ratios / --split text.
TEST_F(TandemModel, LayerSplitOverMissingGpusIsAnError) {
  const std::string m = make("split.gguf", "--preset tiny");
  run_result r = run("run -m " + m + " -p hello -n 2 --gpus 1000,1001");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "1000")) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  r = run("perplexity -m " + m + " -f " + m + " --gpus 0,1 --ratios 1,-2");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "no CUDA backend") || has(r.err, "--ratios")) << r.err;
  r = run("logits -m " + m + " --tokens 1,2 --gpus 0,1 --split rows");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "no CUDA backend") || has(r.err, "unknown split 'rows'")) << r.err;
  r = run("run -m " + m + " -p hello -n 2 --gpus 0,1 --split none");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "no CUDA backend") || has(r.err, "--split none")) << r.err;
}

// A word that names no command says so (not CLI11's "A subcommand is required"), as usage.
TEST_F(TandemModel, UnknownCommandIsNamed) {
  run_result r = run("infoo x");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "unknown command 'infoo'") && has(r.err, "quantize")) << r.err;
}

// bench's depth and ubatch options: documented in --help, checked before any model is loaded
// (bad usage exits 2), and accepted as comma lists (then failing for want of the model file).
TEST_F(TandemModel, BenchDepthAndUbatchOptions) {
  run_result r = run("bench --help");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* opt : {"--depth", "--ubatch", "pp2048 @ d16384", "2048"}) EXPECT_TRUE(has(r.out, opt)) << opt;
  const std::string missing = path("missing.gguf");
  for (const char* bad : {"--ubatch 0", "--ubatch -4", "--depth 0,-1", "--depth x", "-p -1", "-n 1,-128", "-r 0"}) {
    r = run("bench -m " + missing + " " + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.err;
  }
  r = run("bench -m " + missing + " --ubatch 0");
  EXPECT_TRUE(has(r.err, "not in range 1 to 2147483647")) << r.err;
  // 0 in -p / -n asks for no such test (decode-only runs, as llama-bench -p 0).
  for (const char* ok : {"-d 0,512 -u 256 -p 64 -n 4 -r 1", "-p 0 -n 4 -d 512", "-p 16 -n 0"}) {
    r = run("bench -m " + missing + " " + ok);
    EXPECT_EQ(r.code, 1) << ok << ": " << r.err;
    EXPECT_TRUE(has(r.err, "CUDA") || has(r.err, "missing.gguf")) << ok << ": " << r.err;
  }
}

// bench on the CPU backend (--device -1; also the default without a GPU): the llama-bench-like
// table with the CPU as backend, decode set against the host's measured copy bandwidth, prefill
// without a ceiling; depths and decode batches as on the GPU; --json the same figures.
TEST_F(TandemModel, BenchRunsOnTheCpuBackend) {
  const std::string m = make("bench.gguf", "--preset tiny --type Q8_0");
  run_result r = run("bench -m " + m + " --device -1 -t 2 -p 16 -n 4 -r 2 -d 0,8 -b 1,2");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* want : {"ceilings: host memory copy", "GB/s", "threads: 2", "| backend |", "of ceiling"})
    EXPECT_TRUE(has(r.out, want)) << want << "\n" << r.out;
  int rows = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("| CPU ") == std::string::npos) continue;
    ++rows;
    if (has(line, "pp16")) {
      EXPECT_TRUE(has(line, "(no ceiling)")) << line;
    } else {
      EXPECT_TRUE(has(line, "% of copy BW")) << line;
    }
  }
  EXPECT_EQ(rows, 6) << r.out;  // pp16, tg4, tg4 b2 at depths 0 and 8
  for (const char* test : {"pp16 ", "tg4 ", "tg4 b2 ", "pp16 @ d8", "tg4 @ d8", "tg4 b2 @ d8"})
    EXPECT_TRUE(has(r.out, test)) << test << "\n" << r.out;

  r = run("bench -m " + m + " --gpu -1 -p 16 -n 4 -r 1 --json --no-ceilings");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["backend"], "CPU");
  EXPECT_TRUE(j["ceilings"]["copy_gb_per_s"].is_null());
  ASSERT_EQ(j["results"].size(), 2u);
  for (const auto& row : j["results"]) {
    EXPECT_EQ(row["backend"], "CPU");
    EXPECT_GT(row["t_per_s"].get<double>(), 0.0) << row.dump();
  }
  // GPU-only flags on the CPU path are refused with a reason, not ignored.
  r = run("bench -m " + m + " --device -1 -p 16 -n 4 -r 1 --profile");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "--profile needs the CUDA backend")) << r.err;
}

// The 6 GB qwen3-8b Q6_K check is too slow for CI; set TANDEM_SLOW_TESTS=1 to run it.
TEST_F(TandemModel, Qwen3_8B_Q6K_ExactSize) {
  if (!std::getenv("TANDEM_SLOW_TESTS")) GTEST_SKIP() << "set TANDEM_SLOW_TESTS=1";
  const std::string m = make("q8b.gguf", "--preset qwen3-8b --type Q6_K");
  check_layout(m, "Q6_K", 36);
}

}  // namespace
