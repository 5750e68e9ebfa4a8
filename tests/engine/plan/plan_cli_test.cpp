// Runs `tandem-model plan` as a program: on a generated tiny model file and on preset shapes, with
// the exit codes the man page documents (0 fits, 3 does not fit, 2 bad usage).
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tandem_model_harness.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using tandem::test::has;
using tandem::test::run_result;

class PlanCli : public tandem::test::tandem_model_test {
 protected:
  std::string tiny_model() const { return make("tiny.gguf", "--preset tiny --type Q8_0"); }
};

TEST_F(PlanCli, TinyModelFileFitsTwoCardsAsJson) {
  const std::string m = tiny_model();
  const run_result r = run("plan --model " + m + " --devices 16GiB,32GiB --ctx 512 --split tensor --json");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["split"], "tensor");
  EXPECT_TRUE(j["fits"].get<bool>());
  ASSERT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["main_device"], 1);
  // The tiny preset has 2 KV heads: one per card at the default (equal) shares.
  EXPECT_EQ(j["devices"][0]["share"]["kv_heads"], json::array({0, 1}));
  EXPECT_EQ(j["devices"][1]["share"]["kv_heads"], json::array({1, 2}));
  const auto& b = j["devices"][0]["bytes"];
  EXPECT_EQ(b["total"].get<uint64_t>(), b["weights"].get<uint64_t>() + b["kv_cache"].get<uint64_t>() +
                                            b["activations"].get<uint64_t>() + b["workspace"].get<uint64_t>() +
                                            b["overhead"].get<uint64_t>());
  // Per-device file bytes add up to the file's tensors plus the norms each card holds a copy of.
  const uint64_t sum = j["devices"][0]["tensor_bytes"].get<uint64_t>() + j["devices"][1]["tensor_bytes"].get<uint64_t>();
  EXPECT_GT(sum, j["model"]["tensor_bytes"].get<uint64_t>());
}

TEST_F(PlanCli, DoesNotFitExitsThreeWithTheReason) {
  const run_result r = run("plan --preset qwen3-32b --type Q4_K_M --devices 16GiB --ctx 4096");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_TRUE(has(r.out, "fits: no")) << r.out;
  EXPECT_TRUE(has(r.out, "device 0 (16GiB) needs")) << r.out;
  const run_result pair = run("plan --preset qwen3-32b --type Q4_K_M --devices 16GiB,32GiB --ctx 4096");
  EXPECT_EQ(pair.code, 0) << pair.err << pair.out;
  EXPECT_TRUE(has(pair.out, "fits: yes")) << pair.out;
}

TEST_F(PlanCli, RatiosCutHeadsThreeToFive) {
  const run_result r =
      run("plan --preset qwen3-8b --type Q6_K --devices 16GiB,32GiB --ctx 4096 --split tensor --ratios 1,1.75");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "device 0 holds layers 0-35 (36 of 36), KV heads 0-2 (3 of 8)")) << r.out;
  EXPECT_TRUE(has(r.out, "device 1 holds layers 0-35 (36 of 36), KV heads 3-7 (5 of 8)")) << r.out;
}

// The Qwen3.5-27B shape at Q6_K with a 16384-token q8_0 cache fits a 16 + 32 GiB pair split by
// tensors; both devices hold recurrent state and DeltaNet key heads.
TEST_F(PlanCli, Qwen35_27B_Q6K_FitsTwoCardsTensorSplit) {
  const std::string args = "plan --preset qwen3.5-27b --type Q6_K --devices 16GiB,32GiB --split tensor --ctx 16384 --kv q8_0";
  const run_result r = run(args);
  EXPECT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_TRUE(has(r.out, "fits: yes")) << r.out;
  EXPECT_TRUE(has(r.out, "16 attention + 48 Gated DeltaNet layers")) << r.out;
  EXPECT_TRUE(has(r.out, "DeltaNet key heads")) << r.out;
  const run_result js = run(args + " --json");
  ASSERT_EQ(js.code, 0) << js.err;
  const json j = json::parse(js.out);
  for (const auto& d : j["devices"]) {
    EXPECT_GT(d["bytes"]["recurrent_state"].get<uint64_t>(), 0u);
    EXPECT_GT(d["share"]["delta_net_k_heads"][1].get<uint32_t>(), d["share"]["delta_net_k_heads"][0].get<uint32_t>());
  }
}

// GPU model names size the devices and add the labelled speed estimate; sizes alone do not.
TEST_F(PlanCli, GpuModelsAddTheExpectedSpeed) {
  const std::string args =
      "plan --preset qwen3.5-27b --type Q6_K --devices v100-16gb,v100-32gb --split tensor --ctx 16384";
  const run_result r = run(args);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_TRUE(has(r.out, "0 v100-16gb")) << r.out;
  EXPECT_TRUE(has(r.out, "expected speed (a model, not a measurement")) << r.out;
  EXPECT_TRUE(has(r.out, "(peer access, link 12.0 GB/s)")) << r.out;
  EXPECT_TRUE(has(r.out, "(through host memory, no peer access: 6.0 GB/s)")) << r.out;
  const run_result js = run(args + " --json");
  ASSERT_EQ(js.code, 0) << js.err;
  const json j = json::parse(js.out);
  ASSERT_TRUE(j.contains("speed_model")) << js.out;
  const auto& s = j["speed_model"];
  EXPECT_GT(s["peer"]["decode_tok_s"].get<double>(), s["host_staged"]["decode_tok_s"].get<double>());
  EXPECT_GT(s["peer"]["prefill_tok_s"]["2048"].get<double>(), s["peer"]["prefill_tok_s"]["16384"].get<double>());
  EXPECT_EQ(s["devices"][1]["gpu"], "v100-32gb");
  EXPECT_EQ(j["devices"][0]["total_bytes"].get<uint64_t>(), 16945512448ull);

  const run_result sizes = run("plan --preset qwen3.5-27b --type Q6_K --devices 16GiB,32GiB --ctx 16384");
  EXPECT_EQ(sizes.code, 0) << sizes.err;
  EXPECT_FALSE(has(sizes.out, "expected speed")) << sizes.out;
  // A plan that does not fit gets no speed.
  const run_result small = run("plan --preset qwen3.5-27b --type Q6_K --devices v100-16gb --ctx 16384");
  EXPECT_EQ(small.code, 3) << small.err;
  EXPECT_FALSE(has(small.out, "expected speed")) << small.out;
  const run_result unknown = run("plan --preset qwen3-8b --devices a100-80gb");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_TRUE(has(unknown.err, "v100-16gb, v100-32gb, h200")) << unknown.err;
}

TEST_F(PlanCli, BadUsageExitsTwo) {
  struct bad_case {
    std::string args, message;
  };
  const bad_case cases[] = {
      {"--devices 0=abc", "abc"},
      {"--devices 16GiB,32GiB --split layer --ratios 1,0", "greater than zero"},
      {"--devices 16GiB,32GiB --split layer --ratios 1,-1", "not a positive number"},
      {"--devices 16GiB,32GiB --split diagonal", "unknown split 'diagonal'"},
      {"--devices 16GiB,32GiB --ratios 1,2,3", "3 ratios for 2 devices"},
      {"--devices 16GiB --kv q4_k", "unknown KV type"},
      {"--devices 16GiB,32GiB --main-device 5", "not a position"},
  };
  for (const auto& c : cases) {
    const run_result r = run("plan --preset qwen3-8b " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_TRUE(has(r.err, c.message)) << c.args << "\n" << r.err;
  }
  const run_result neither = run("plan --devices 16GiB");
  EXPECT_EQ(neither.code, 2);
  EXPECT_TRUE(has(neither.err, "--model")) << neither.err;
#ifdef TANDEM_TEST_CPU_ONLY
  const run_result ids = run("plan --preset qwen3-8b --devices 0,1");
  EXPECT_EQ(ids.code, 2);
  EXPECT_TRUE(has(ids.err, "no CUDA support")) << ids.err;
#endif
}

TEST_F(PlanCli, MissingFileIsAFailure) {
  const run_result r = run("plan --model " + (dir_ / "absent.gguf").string() + " --devices 16GiB");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "absent.gguf")) << r.err;
}

}  // namespace
