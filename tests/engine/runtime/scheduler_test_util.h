// Shared by the scheduler's CPU and CUDA tests: tiny engines, prompts, and the check that
// batched greedy generations equal the same requests run alone.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#ifdef TANDEM_HAVE_CUDA_BACKEND
#include "backend/cuda/cuda_backend.h"
#endif
#include "runtime/scheduler.h"
#include "tiny_model.h"

namespace tandem::test {

struct engine {
  std::unique_ptr<test::tiny_model> model;
  std::unique_ptr<backend> be;
  std::unique_ptr<kv_cache> cache;
};

inline engine make_engine(const std::string& arch, uint32_t n_seq, uint32_t n_ctx = 64, bool gpu = false) {
  engine e;
  test::tiny_model_options opt;
  opt.arch = arch;
  if (arch == "qwen35") opt.hp = test::tiny_model_options::qwen35_hparams();
  if (arch == "qwen3moe") opt.hp = test::tiny_model_options::qwen3moe_hparams();
  opt.matrix_type = ggml_type::q8_0;
  auto m = test::make_tiny_model(opt);
  EXPECT_TRUE(m.ok()) << m.message();
  e.model = std::move(m.value());
  if (gpu) {
#ifdef TANDEM_HAVE_CUDA_BACKEND
    auto be = make_cuda_backend(e.model->desc, cuda_backend_options{});
    EXPECT_TRUE(be.ok()) << be.message();
    e.be = std::move(be.value());
#endif
  } else {
    e.be = std::move(make_cpu_backend(e.model->desc, {.n_threads = 2}).value());
  }
  kv_cache_config cfg;
  cfg.n_ctx = n_ctx;
  cfg.n_seq_max = n_seq;
  e.cache = std::move(e.be->make_cache(cfg).value());
  return e;
}

// Built this way round: `"<" + to_string` trips a false -Wrestrict in GCC 12.
inline std::string text_of(int32_t id) {
  std::string s = "<";
  s += std::to_string(id);
  s += '>';
  return s;
}

inline std::vector<int32_t> prompt_of(int i, size_t n) {
  std::vector<int32_t> p;
  for (size_t j = 0; j < n; ++j) p.push_back(int32_t((i * 37 + j * 11 + 3) % 90));
  return p;
}

inline session_request greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  session_request r;
  r.prompt = std::move(prompt);
  r.params.sampling.temperature = 0;
  r.params.max_tokens = max_tokens;
  return r;
}

// Polls until pred holds or two seconds pass.
template <class F>
bool eventually(F pred) {
  for (int i = 0; i < 400; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

// Eight requests over four slots, prompts of different lengths prefilled in small chunks beside
// the others' decode tokens: each gets exactly the tokens and text it gets alone.
// Alone and batched, prompts are cut at the same chunk boundaries; batched, up to `slots` decode
// tokens share each pass with a chunk of others' prompts.
inline void check_batched_equals_alone(const std::string& arch, bool gpu, uint32_t chunk = 4, uint32_t slots = 4) {
  constexpr int n = 8;
  std::vector<std::vector<int32_t>> alone(n);
  uint64_t alone_steps = 0;
  {
    auto e = make_engine(arch, 1, 64, gpu);
    scheduler s(*e.be, *e.cache, text_of, {.chunk_tokens = chunk, .prefix_reuse = false});
    for (int i = 0; i < n; ++i) {
      auto r = s.generate(greedy(prompt_of(i, 5 + 3 * i), 10), {});
      ASSERT_TRUE(r.ok()) << r.message();
      alone[i] = r->tokens;
    }
    alone_steps = s.counts().steps;
  }
  auto e = make_engine(arch, slots, 64, gpu);
  scheduler s(*e.be, *e.cache, text_of, {.chunk_tokens = chunk, .prefix_reuse = false});
  std::vector<std::promise<result<generate_result>>> done(n);
  std::vector<std::string> streamed(n);
  for (int i = 0; i < n; ++i) {
    auto id = s.submit(
        greedy(prompt_of(i, 5 + 3 * i), 10),
        [&streamed, i](std::string_view t) {
          streamed[i] += t;
          return true;
        },
        [&done, i](result<generate_result> r) { done[i].set_value(std::move(r)); });
    ASSERT_TRUE(id.ok()) << id.message();
  }
  for (int i = 0; i < n; ++i) {
    auto r = done[i].get_future().get();
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->tokens, alone[i]) << arch << " request " << i;
    EXPECT_EQ(r->text, streamed[i]);
    EXPECT_EQ(r->reason, stop_reason::max_tokens);
    EXPECT_EQ(r->n_prompt, size_t(5 + 3 * i));
  }
  const auto c = s.counts();
  EXPECT_EQ(c.slots, slots);
  EXPECT_EQ(c.running, 0u);
  EXPECT_EQ(c.waiting, 0u);
  // Batched: fewer passes than one at a time (decode tokens share them).
  EXPECT_LT(c.steps, alone_steps);
}

}  // namespace tandem::test
