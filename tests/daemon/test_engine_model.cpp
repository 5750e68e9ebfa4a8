// What the daemon's memory budget charges a model before loading it (engine_model_bytes) against
// what loading it allocates: the file plus its sequence cache, for a plain and a hybrid model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "quant/ggml_type.h"
#include "registry/engine_model.h"
#include "tiny_model.h"

namespace tandem::daemon {
namespace {

// Writes a tiny model of `arch` to a temp file; returns its path.
std::string write_model(const std::string& arch, const hparams& hp) {
  test::tiny_model_options o;
  o.arch = arch;
  o.hp = hp;
  auto bytes = test::tiny_model_bytes(o);
  EXPECT_TRUE(bytes.ok()) << bytes.message();
  const std::string path = testing::TempDir() + "tandem_engine_model_" + arch + std::to_string(::getpid()) + ".gguf";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes->data()), std::streamsize(bytes->size()));
  return path;
}

// The cache load_engine_model makes (`parallel` sequences, the default block size and f16 type,
// the context capped by the model's), built here on the CPU backend.
uint64_t cache_bytes(const std::string& path, const engine_options& opt) {
  auto m = load_model(path);
  EXPECT_TRUE(m.ok()) << m.message();
  auto be = make_cpu_backend(m->desc, {1});
  EXPECT_TRUE(be.ok()) << be.message();
  kv_cache_config c;
  c.n_ctx = std::min(opt.context, m->desc.hp.n_ctx_train);
  c.n_seq_max = opt.parallel;
  c.n_blocks = uint32_t((opt.kv_tokens + c.block_size - 1) / c.block_size);
  c.type = *type_from_name(opt.kv_type);
  auto cache = (*be)->make_cache(c);
  EXPECT_TRUE(cache.ok()) << cache.message();
  return (*cache)->bytes();
}

uint64_t file_size(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  return uint64_t(f.tellg());
}

TEST(engine_model, budget_charge_is_the_file_plus_the_cache_it_allocates) {
  const std::pair<std::string, hparams> models[] = {
      {"qwen3", test::tiny_model_options::default_hparams()},
      {"qwen35", test::tiny_model_options::qwen35_hparams()},
      {"qwen3moe", test::tiny_model_options::qwen3moe_hparams()},
      {"qwen35moe", test::tiny_model_options::qwen35moe_hparams()}};
  struct setting {
    unsigned parallel;
    uint64_t kv_tokens;  // 100: a pool of 7 blocks shared by four sequences
    const char* kv_type;
  };
  for (auto [parallel, kv_tokens, kv_type] : {setting{1, 0, "f16"}, setting{4, 0, "f16"}, setting{4, 100, "f16"},
                                              setting{2, 0, "q8_0"}}) {
    engine_options opt;
    opt.parallel = parallel;
    opt.kv_tokens = kv_tokens;
    opt.kv_type = kv_type;
    for (const auto& [arch, hp] : models) {
      const std::string path = write_model(arch, hp);
      auto charged = engine_model_bytes(path, opt);
      ASSERT_TRUE(charged.ok()) << charged.message();
      // qwen35: K/V for its one attention layer only, plus the DeltaNet state and checkpoint.
      EXPECT_EQ(*charged, file_size(path) + cache_bytes(path, opt)) << arch << " parallel " << parallel << " kv_tokens " << kv_tokens << " " << kv_type;
      std::remove(path.c_str());
    }
  }
}

}  // namespace
}  // namespace tandem::daemon
