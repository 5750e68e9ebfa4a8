// Replays the committed seeds of safetensors_fuzz through its entry point with the ordinary
// compiler, and checks their naming: valid_* parse, bad_* are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <span>

#include "convert/safetensors.h"
#include "corpus_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

TEST(safetensors_fuzz_corpus, replay) {
  const auto dir = std::filesystem::path(TANDEM_FUZZ_CORPUS_DIR) / "safetensors";
  tandem::test::seed_counts n;
  for (const auto& [name, bytes] : tandem::test::replay_corpus(dir, LLVMFuzzerTestOneInput)) {
    const auto f = tandem::safetensors_file::parse(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), name);
    n.check(name, f.ok(), f.ok() ? "" : f.message());
  }
  EXPECT_GE(n.valid, 3);
  EXPECT_GE(n.bad, 3);
}
