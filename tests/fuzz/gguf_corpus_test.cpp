// Replays the committed seed corpus through the fuzz entry point with the ordinary compiler, and
// checks the naming convention of the seeds: valid_* parse, bad_* are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "corpus_files.h"
#include "gguf/gguf_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

TEST(gguf_fuzz_corpus, replay) {
  const auto dir = std::filesystem::path(TANDEM_FUZZ_CORPUS_DIR) / "gguf";
  tandem::test::seed_counts n;
  for (const auto& [name, text] : tandem::test::replay_corpus(dir, LLVMFuzzerTestOneInput)) {
    const std::vector<uint8_t> bytes(text.begin(), text.end());
    EXPECT_LT(bytes.size(), 4096u) << name;
    auto f = tandem::gguf_file::parse(bytes);
    n.check(name, f.ok(), f.ok() ? "" : f.message());
  }
  EXPECT_GE(n.valid, 3);
  EXPECT_GE(n.bad, 3);
  EXPECT_EQ(n.other, 0);
}
