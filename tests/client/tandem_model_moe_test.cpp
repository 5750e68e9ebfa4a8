// tandem-model for the MoE presets: the tiny ones bind with the converter's types (routers and the
// shared-expert gate F32, the 3-D expert tensors quantized per row) and generate on the CPU; the
// large ones have their models' shapes; plan counts the experts as their own category and bench's
// active bytes (plan/active_weights.h) read k of n experts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gguf/gguf_reader.h"
#include "model/model_desc.h"
#include "plan/active_weights.h"
#include "plan/shape_model.h"
#include "presets.h"
#include "quant/quant.h"
#include "tandem_model_harness.h"

namespace tandem {
namespace {

using TandemModel = test::tandem_model_test;

TEST_F(TandemModel, MoeTinyPresetsBindAndRun) {
  for (const std::string preset : {"qwen3moe-tiny", "qwen3.5moe-tiny"}) {
    for (const std::string type : {"F16", "Q4_K_M"}) {
      const std::string m = make(preset + "-" + type + ".gguf", "--preset " + preset + " --type " + type);
      auto f = gguf_file::open(m);
      ASSERT_TRUE(f.ok()) << f.message();
      auto desc = bind_model(*f);
      ASSERT_TRUE(desc.ok()) << preset << " " << type << ": " << desc.message();
      const hparams& hp = desc->hp;
      EXPECT_EQ(hp.n_expert, 8u);
      EXPECT_EQ(hp.n_expert_used, 2u);
      EXPECT_EQ(hp.n_ff_exp, 256u);
      EXPECT_NE(hp.n_ff_exp, hp.n_ff);
      EXPECT_TRUE(hp.expert_weights_norm);
      for (const auto& l : desc->layers) {
        EXPECT_EQ(l.ffn_gate_inp->type, ggml_type::f32);
        EXPECT_EQ(l.ffn_gate_exps->n_dims, 3u);
        if (type != "F16") {
          EXPECT_NE(type_info(l.ffn_down_exps->type).block_size, 1u);
        }
        if (l.ffn_gate_inp_shexp) {
          EXPECT_EQ(l.ffn_gate_inp_shexp->type, ggml_type::f32);
        }
      }
      const test::run_result r = run("run -m " + m + " -p hello -n 8 --temp 0");
      EXPECT_EQ(r.code, 0) << r.err;
    }
  }
  auto f = gguf_file::open(path("qwen3.5moe-tiny-F16.gguf"));
  ASSERT_TRUE(f.ok());
  auto d = bind_model(*f);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->hp.n_ff_shexp, 512u);
  EXPECT_EQ(f->find("qwen35moe.feed_forward_length"), nullptr);  // as llama.cpp's converter writes it
}

TEST_F(TandemModel, MoePresetShapes) {
  const model_preset* q3 = find_preset("qwen3-30b-a3b");
  ASSERT_NE(q3, nullptr);
  EXPECT_EQ(q3->arch, "qwen3moe");
  EXPECT_EQ(q3->hp.n_embd, 2048u);
  EXPECT_EQ(q3->hp.n_layer, 48u);
  EXPECT_EQ(q3->hp.n_expert, 128u);
  EXPECT_EQ(q3->hp.n_expert_used, 8u);
  EXPECT_EQ(q3->hp.n_ff_exp, 768u);
  const model_preset* q35 = find_preset("qwen3.5-35b-a3b");
  ASSERT_NE(q35, nullptr);
  EXPECT_EQ(q35->arch, "qwen35moe");
  EXPECT_EQ(q35->hp.n_expert, 256u);
  EXPECT_EQ(q35->hp.n_ff_shexp, 512u);
  EXPECT_EQ(q35->hp.ssm_dt_rank, 32u);
  // The seed's model: 177B weights, about 6B of them read per token besides the embeddings.
  const model_preset* big = find_preset("moe-177b-a6b");
  ASSERT_NE(big, nullptr);
  auto m = make_shape_model(big->arch, big->hp, [](const tensor_spec&) { return ggml_type::f32; });
  ASSERT_TRUE(m.ok()) << m.message();
  uint64_t params = 0;
  for (const auto& t : (*m)->tensors) params += t.n_elements;
  EXPECT_NEAR(double(params) / 1e9, 177.8, 0.5);
  const active_weights a = active_per_token((*m)->desc);
  const double head = double((*m)->desc.output->n_elements);
  EXPECT_NEAR((double(a.params) - head) / 1e9, 5.9, 0.3);
  EXPECT_LT(a.bytes, routed_expert_bytes((*m)->desc) / 10);
}

TEST_F(TandemModel, PlanCountsExpertsSeparately) {
  const test::run_result r = run("plan --preset moe-177b-a6b --devices 141GiB --ctx 8192 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& dev = j["devices"][0]["bytes"];
  EXPECT_GT(dev["experts"].get<double>(), 90.0 * (1ull << 30));  // ~98 GiB of Q4_K_M experts
  EXPECT_LT(dev["weights"].get<double>(), 4.0 * (1ull << 30));
  EXPECT_EQ(j["model"]["experts"]["n_expert"], 512);
  EXPECT_EQ(j["model"]["experts"]["n_expert_used"], 10);
  EXPECT_LT(j["model"]["experts"]["active_bytes_per_token"].get<double>(), 5.0 * (1ull << 30));
  const double total = j["model"]["tensor_bytes"].get<double>() / (1ull << 30);
  EXPECT_NEAR(total, 100.0, 5.0);  // "about 100 GiB at Q4_K_M"
  const test::run_result t = run("plan --preset qwen3-30b-a3b --devices 16GiB,16GiB --split tensor");
  EXPECT_NE(t.code, 0);
  EXPECT_NE(t.err.find("tensor split of qwen3moe"), std::string::npos) << t.err;
}

}  // namespace
}  // namespace tandem
