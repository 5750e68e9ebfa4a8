// End to end against Hugging Face: imports the tiny random checkpoints that transformers wrote
// (tests/reference/qwen35_tiny from scripts/qwen35_reference.py; qwen3moe_tiny and qwen35moe_tiny
// from scripts/moe_reference.py), runs the CPU backend (or, built with TANDEM_REFERENCE_CUDA, the
// CUDA backend on GPU 0) and compares the prompt's logits and the 64-token greedy continuation with
// transformers'. Each directory is skipped until the script's output is checked in.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/cpu/cpu_backend.h"
#ifdef TANDEM_REFERENCE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "convert/hf_import.h"
#include "model/model_desc.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// TANDEM_REFERENCE_ROOT points the test at another directory holding the scripts' outputs.
fs::path reference_root() {
  const char* env = std::getenv("TANDEM_REFERENCE_ROOT");
  return env && *env ? fs::path(env) : fs::path(TANDEM_SOURCE_DIR) / "tests/reference";
}

// Tolerance, as a fraction of the logit scale. The CPU: both sides compute in fp32 from the same
// fp32 weights, so they differ only by summation order (mat-vec splits, softmax, the chunked
// against the recurrent delta rule, the order experts are summed in), a relative ~1e-6 per op that
// stays well under 1e-4 of the scale after 4 layers, provided both select the same experts: the
// MoE script refuses seeds whose router probabilities come within 1e-4 of a tie at the k-th place,
// so fp32 rounding cannot flip a choice. 1e-3 leaves a 10x margin, while any real mistake (a missed
// reorder or +1, wrong rotary dims, a wrong decay; a wrong expert row offset, gate and up swapped,
// weights not renormalised, a missing shared-expert gate) moves logits by 10% or more of it. The
// GPU's prefill GEMMs
// take fp16 activations (a relative 5e-4 rounding per operand): 1e-2 of the scale.
#ifdef TANDEM_REFERENCE_CUDA
constexpr float k_tolerance = 1e-2f;
#else
constexpr float k_tolerance = 1e-3f;
#endif

result<std::unique_ptr<backend>> make_reference_backend(const model_desc& d) {
#ifdef TANDEM_REFERENCE_CUDA
  if (cuda_backend_device_count() == 0) return make_error("no CUDA device");
  cuda_backend_options o;
  auto be = make_cuda_backend(d, o);
  if (!be) return be.err();
  return std::unique_ptr<backend>(std::move(*be));
#else
  return make_cpu_backend(d, {2});
#endif
}

int32_t argmax(const float* row, uint32_t n) { return int32_t(std::max_element(row, row + n) - row); }

// Top-1 minus top-2: how close a greedy choice is to a tie (for failure messages).
float margin(const float* row, uint32_t n) {
  std::vector<float> v(row, row + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

class transformers_reference : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const fs::path k_ref_dir = reference_root() / GetParam();
    if (!fs::exists(k_ref_dir / "model.safetensors"))
      GTEST_SKIP() << "no " << (k_ref_dir / "model.safetensors").string()
                   << " (run scripts/qwen35_reference.py or scripts/moe_reference.py to make it)";
    std::ifstream in(k_ref_dir / "reference.json");
    ASSERT_TRUE(in) << "reference.json missing beside model.safetensors";
    std::stringstream ss;
    ss << in.rdbuf();
    ref_ = json::parse(ss.str());
    gguf_ = fs::temp_directory_path() /
            ("tandem-hf-ref-" + GetParam() + "-" + std::to_string(::getpid()) + ".gguf");
    import_options opt;
    opt.type = ggml_type::f32;  // the reference ran in float32: nothing to lose on the way
    opt.tokenizer = false;
    auto s = import_hf_model(k_ref_dir.string(), gguf_.string(), opt);
    ASSERT_TRUE(s.ok()) << s.message();
    auto m = load_model(gguf_.string());
    ASSERT_TRUE(m.ok()) << m.message();
    model_ = std::move(*m);
    ASSERT_EQ(model_.desc.hp.moe(), GetParam().find("moe") != std::string::npos)
        << "the reference checkpoint imported as the wrong kind of model";
    auto be = make_reference_backend(model_.desc);
#ifdef TANDEM_REFERENCE_CUDA
    if (!be && cuda_backend_device_count() == 0) GTEST_SKIP() << "no CUDA device";
#endif
    ASSERT_TRUE(be.ok()) << be.message();
    be_ = std::move(*be);
    kv_cache_config c;
    c.n_ctx = 256;
    c.n_seq_max = 2;
    c.type = ggml_type::f32;  // an F16 cache would round K/V where transformers keeps fp32
    auto cache = be_->make_cache(c);
    ASSERT_TRUE(cache.ok()) << cache.message();
    cache_ = std::move(*cache);
  }
  void TearDown() override {
    if (!gguf_.empty()) fs::remove(gguf_);
  }

  // Runs tokens [0, n) of `toks` on sequence `seq` from position `first`, logits for all of them.
  std::vector<float> run(const std::vector<int32_t>& toks, int32_t seq, int32_t first) {
    batch b;
    for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], seq, first + int32_t(i), true);
    std::vector<float> logits;
    auto s = be_->forward(b, *cache_, logits);
    EXPECT_TRUE(s.ok()) << s.message();
    return logits;
  }

  json ref_;
  fs::path gguf_;
  loaded_model model_;
  std::unique_ptr<backend> be_;
  std::unique_ptr<kv_cache> cache_;
};

TEST_P(transformers_reference, prompt_logits_and_greedy_continuation_match_transformers) {
  const auto prompt = ref_["prompt"].get<std::vector<int32_t>>();
  const auto greedy = ref_["greedy"].get<std::vector<int32_t>>();
  const uint32_t V = be_->n_vocab();
  ASSERT_EQ(V, 512u);
  const std::vector<float> logits = run(prompt, 0, 0);
  ASSERT_EQ(logits.size(), prompt.size() * V);

  float scale = 1.f, worst = 0.f;
  for (const json& row : ref_["logits"])
    for (const json& x : row) scale = std::max(scale, std::fabs(x.get<float>()));
  const auto positions = ref_["logits_positions"].get<std::vector<int>>();
  for (size_t r = 0; r < positions.size(); ++r) {
    const auto want = ref_["logits"][r].get<std::vector<float>>();
    ASSERT_EQ(want.size(), V);
    for (uint32_t v = 0; v < V; ++v)
      worst = std::max(worst, std::fabs(logits[size_t(positions[r]) * V + v] - want[v]));
  }
  EXPECT_LE(worst, k_tolerance * scale) << "max |logit difference| over the last 4 prompt positions";
  std::printf("%s: max |logit diff| %.3g (logit scale %.3g, reference min margin %.3g, routing margin %.3g)\n",
              GetParam().c_str(), worst, scale, ref_["min_margin"].get<double>(),
              ref_.value("min_routing_margin", 0.0));

  const auto prompt_argmax = ref_["prompt_argmax"].get<std::vector<int32_t>>();
  for (size_t i = 0; i < prompt.size(); ++i)
    EXPECT_EQ(argmax(&logits[i * V], V), prompt_argmax[i]) << "prompt position " << i;

  // Greedy decode one token at a time (the recurrent path). Each step feeds the reference's token,
  // so one near-tie cannot derail the rest of the comparison.
  int32_t predicted = argmax(&logits[(prompt.size() - 1) * V], V);
  float last_margin = margin(&logits[(prompt.size() - 1) * V], V);
  for (size_t i = 0; i < greedy.size(); ++i) {
    EXPECT_EQ(predicted, greedy[i]) << "continuation token " << i << " (our top-2 margin " << last_margin << ")";
    const std::vector<float> step = run({greedy[i]}, 0, int32_t(prompt.size() + i));
    ASSERT_EQ(step.size(), V);
    predicted = argmax(step.data(), V);
    last_margin = margin(step.data(), V);
  }
}

// The whole prompt + continuation as one prefill on another sequence (the chunked delta rule over
// more than one chunk; experts over 88 tokens at once) must pick the same tokens as transformers'
// no-cache pass.
TEST_P(transformers_reference, one_pass_over_prompt_and_continuation_matches) {
  std::vector<int32_t> all = ref_["prompt"].get<std::vector<int32_t>>();
  for (const json& t : ref_["greedy"]) all.push_back(t.get<int32_t>());
  const auto want = ref_["nocache_argmax"].get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), all.size());
  const uint32_t V = be_->n_vocab();
  const std::vector<float> logits = run(all, 1, 0);
  ASSERT_EQ(logits.size(), all.size() * V);
  for (size_t i = 0; i < all.size(); ++i)
    EXPECT_EQ(argmax(&logits[i * V], V), want[i]) << "position " << i << " (our top-2 margin "
                                                  << margin(&logits[i * V], V) << ")";
}

INSTANTIATE_TEST_SUITE_P(tiny, transformers_reference,
                         ::testing::Values("qwen35_tiny", "qwen3moe_tiny", "qwen35moe_tiny"));

}  // namespace
}  // namespace tandem
