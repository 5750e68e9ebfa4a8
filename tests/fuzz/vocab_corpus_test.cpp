// Replays the committed seeds of vocab_fuzz through its entry point with the ordinary compiler
// (its checks trap on a failure).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>

#include "corpus_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(vocab_fuzz_corpus, replay) {
  const auto seeds = tandem::test::corpus_files(std::filesystem::path(TANDEM_FUZZ_CORPUS_DIR) / "vocab");
  EXPECT_GE(seeds.size(), 5u);
  for (const auto& [name, bytes] : seeds) {
    SCOPED_TRACE(name);
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), 0);
  }
}

}  // namespace
