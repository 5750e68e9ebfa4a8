// The file-type rule shared by make and quantize: names, targets, llama.cpp's mixtures and fallbacks.
#include "quant_mix.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

mix_context dense(uint32_t n_layer, bool has_output) {
  std::vector<std::string> names;
  for (uint32_t l = 0; l < n_layer; ++l) names.push_back("blk." + std::to_string(l) + ".attn_v.weight");
  if (has_output) names.push_back("output.weight");
  return make_mix_context(names, n_layer, 0);
}

ggml_type pick(std::string_view target, const std::string& name, uint64_t row, const mix_context& c) {
  return choose_type(*find_target(target), name, row, c).type;
}

TEST(QuantMix, FileTypeNamesFollowLlamaCpp) {
  EXPECT_EQ(file_type_name(0), "ALL_F32");
  EXPECT_EQ(file_type_name(1), "MOSTLY_F16");
  EXPECT_EQ(file_type_name(7), "MOSTLY_Q8_0");
  EXPECT_EQ(file_type_name(15), "MOSTLY_Q4_K_M");
  EXPECT_EQ(file_type_name(18), "MOSTLY_Q6_K");
  EXPECT_EQ(file_type_name(32), "MOSTLY_BF16");
  EXPECT_EQ(file_type_name(999), "UNKNOWN_999");
}

TEST(QuantMix, TargetsParseCaseInsensitivelyWithAliases) {
  ASSERT_TRUE(find_target("q4_k_m"));
  EXPECT_EQ(find_target("q4_k_m")->ftype, file_type::mostly_q4_k_m);
  EXPECT_EQ(find_target("Q4_K")->ftype, file_type::mostly_q4_k_m);
  EXPECT_EQ(find_target("Q5_K")->ftype, file_type::mostly_q5_k_m);
  EXPECT_EQ(find_target("bf16")->base, ggml_type::bf16);
  EXPECT_FALSE(find_target("Q3_K_M"));  // no Q3_K quantizer in this build
  EXPECT_FALSE(find_target(""));
}

TEST(QuantMix, OnlyMatricesAreQuantizable) {
  EXPECT_TRUE(is_quantizable("blk.0.attn_q.weight", 2));
  EXPECT_TRUE(is_quantizable("blk.0.ffn_down_exps.weight", 3));
  EXPECT_FALSE(is_quantizable("blk.0.attn_norm.weight", 1));
  EXPECT_FALSE(is_quantizable("blk.0.attn_q_norm.weight", 2));
  EXPECT_FALSE(is_quantizable("blk.0.attn_q.bias", 1));
  EXPECT_FALSE(is_quantizable("blk.0.ffn_gate_inp.weight", 2));
  EXPECT_FALSE(is_quantizable("blk.0.ssm_conv1d.weight", 2));
}

// Q4_K_M on 32 layers: attn_v and ffn_down are Q6_K where use_more_bits(i, 32) holds, i.e.
// i < 4, i >= 28, or (i - 4) % 3 == 2 (6, 9, ..., 27).
TEST(QuantMix, Q4KMPromotesAttnVAndFfnDownOnUseMoreBitsLayers) {
  const auto c = dense(32, true);
  for (int i = 0; i < 32; ++i) {
    const bool more = i < 4 || i >= 28 || (i - 4) % 3 == 2;
    const ggml_type want = more ? ggml_type::q6_k : ggml_type::q4_k;
    const std::string blk = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(pick("Q4_K_M", blk + "attn_v.weight", 4096, c), want) << i;
    EXPECT_EQ(pick("Q4_K_M", blk + "ffn_down.weight", 4096, c), want) << i;
    EXPECT_EQ(pick("Q4_K_M", blk + "attn_q.weight", 4096, c), ggml_type::q4_k) << i;
    EXPECT_EQ(pick("Q4_K_M", blk + "ffn_up.weight", 4096, c), ggml_type::q4_k) << i;
    EXPECT_EQ(pick("Q5_K_M", blk + "attn_v.weight", 4096, c), more ? ggml_type::q6_k : ggml_type::q5_k);
  }
  EXPECT_EQ(pick("Q4_K_M", "output.weight", 4096, c), ggml_type::q6_k);
  EXPECT_EQ(pick("Q4_K_M", "token_embd.weight", 4096, c), ggml_type::q4_k);
}

TEST(QuantMix, TiedEmbeddingIsTreatedAsTheOutputHead) {
  const auto c = dense(4, false);
  EXPECT_EQ(pick("Q4_K_M", "token_embd.weight", 1024, c), ggml_type::q6_k);
  EXPECT_EQ(pick("Q8_0", "token_embd.weight", 1024, c), ggml_type::q8_0);
  EXPECT_EQ(pick("Q4_0", "token_embd.weight", 1024, c), ggml_type::q6_k);
}

TEST(QuantMix, Q4KSUsesQ5KForEarlyLayers) {
  const auto c = dense(16, true);
  EXPECT_EQ(pick("Q4_K_S", "blk.3.attn_v.weight", 256, c), ggml_type::q5_k);
  EXPECT_EQ(pick("Q4_K_S", "blk.4.attn_v.weight", 256, c), ggml_type::q4_k);
  EXPECT_EQ(pick("Q4_K_S", "blk.1.ffn_down.weight", 256, c), ggml_type::q5_k);  // 1 < 16/8
  EXPECT_EQ(pick("Q4_K_S", "blk.2.ffn_down.weight", 256, c), ggml_type::q4_k);
}

TEST(QuantMix, FloatTargetsAreUniform) {
  const auto c = dense(8, true);
  EXPECT_EQ(pick("F16", "output.weight", 100, c), ggml_type::f16);
  EXPECT_EQ(pick("BF16", "blk.0.attn_v.weight", 100, c), ggml_type::bf16);
  EXPECT_EQ(pick("F32", "blk.0.ffn_down.weight", 100, c), ggml_type::f32);
}

TEST(QuantMix, RowsNotMultipleOf256FallBack) {
  const auto c = dense(8, true);
  // 896 = 28 * 32: K-quants fall back to the 32-element types.
  auto q4 = choose_type(*find_target("Q4_K_M"), "blk.1.attn_q.weight", 896, c);
  EXPECT_EQ(q4.type, ggml_type::q5_0);
  EXPECT_TRUE(q4.fallback);
  EXPECT_EQ(pick("Q4_K_M", "blk.0.attn_v.weight", 896, c), ggml_type::q8_0);  // Q6_K -> Q8_0
  EXPECT_EQ(pick("Q5_K_S", "blk.1.attn_q.weight", 896, c), ggml_type::q5_1);
  EXPECT_EQ(pick("Q4_K_M", "output.weight", 896, c), ggml_type::q8_0);
  // 100 is not a multiple of 32 either: F16.
  EXPECT_EQ(pick("Q8_0", "blk.1.attn_q.weight", 100, c), ggml_type::f16);
  EXPECT_FALSE(choose_type(*find_target("Q4_K_M"), "blk.1.attn_q.weight", 1024, c).fallback);
}

TEST(QuantMix, PureSkipsTheMixture) {
  const auto c = dense(8, true);
  EXPECT_EQ(choose_type(*find_target("Q4_K_M"), "output.weight", 1024, c, true).type, ggml_type::q4_k);
  EXPECT_EQ(choose_type(*find_target("Q4_K_M"), "blk.0.attn_v.weight", 1024, c, true).type,
            ggml_type::q4_k);
}

TEST(QuantMix, EightExpertModelsKeepAttentionKVAtQ8) {
  std::vector<std::string> names{"blk.0.attn_v.weight", "output.weight"};
  const auto c = make_mix_context(names, 1, 8);
  EXPECT_EQ(pick("Q4_K_M", "blk.0.attn_v.weight", 4096, c), ggml_type::q8_0);
  EXPECT_EQ(pick("Q4_K_M", "blk.0.attn_k.weight", 4096, c), ggml_type::q8_0);
  EXPECT_EQ(pick("Q4_K_M", "blk.0.attn_output.weight", 4096, c), ggml_type::q5_k);
}

// Qwen MoE files: the routers stay float (llama-quantize skips ffn_gate_inp; the shared expert's
// gate is 1-D), the 3-D experts are matrices, and every ffn_down (routed and shared) follows
// use_more_bits by its layer number, as llama.cpp parses it from the name for MoE models.
TEST(QuantMix, MoeExpertsFollowTheFfnDownRuleByLayer) {
  EXPECT_FALSE(is_quantizable("blk.0.ffn_gate_inp.weight", 2));
  EXPECT_FALSE(is_quantizable("blk.0.ffn_gate_inp_shexp.weight", 1));
  EXPECT_TRUE(is_quantizable("blk.0.ffn_gate_exps.weight", 3));
  std::vector<std::string> names{"output.weight"};
  for (int l = 0; l < 48; ++l) names.push_back("blk." + std::to_string(l) + ".attn_v.weight");
  const auto c = make_mix_context(names, 48, 128);
  for (int i = 0; i < 48; ++i) {
    const bool more = i < 6 || i >= 42 || (i - 6) % 3 == 2;
    const std::string blk = "blk." + std::to_string(i) + ".";
    EXPECT_EQ(pick("Q4_K_M", blk + "ffn_down_exps.weight", 768, c), more ? ggml_type::q6_k : ggml_type::q4_k) << i;
    EXPECT_EQ(pick("Q4_K_M", blk + "ffn_down_shexp.weight", 768, c), more ? ggml_type::q6_k : ggml_type::q4_k) << i;
    EXPECT_EQ(pick("Q4_K_M", blk + "ffn_gate_exps.weight", 2048, c), ggml_type::q4_k) << i;
  }
}

}  // namespace
}  // namespace tandem
