// Replays the committed seed corpus through the fuzz entry point with the ordinary compiler, and
// checks the naming convention of the seeds: valid_* parse, bad_* are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "corpus_files.h"
#include "gguf/gguf_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(gguf_fuzz_corpus, replay) {
  size_t n = 0, valid = 0, bad = 0;
  for (const auto& [name, text] : tandem::test::corpus_files(std::filesystem::path(TANDEM_FUZZ_CORPUS_DIR) / "gguf")) {
    const std::vector<uint8_t> bytes(text.begin(), text.end());
    SCOPED_TRACE(name);
    EXPECT_LT(bytes.size(), 4096u);
    EXPECT_EQ(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()), 0);
    auto f = tandem::gguf_file::parse(bytes);
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_TRUE(f.ok()) << f.message();
      ++valid;
    } else if (name.rfind("bad_", 0) == 0) {
      EXPECT_FALSE(f.ok());
      ++bad;
    }
    ++n;
  }
  EXPECT_GE(valid, 3u);
  EXPECT_GE(bad, 3u);
  EXPECT_EQ(n, valid + bad);
}

}  // namespace
