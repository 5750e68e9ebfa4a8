// Replays the committed seeds of safetensors_fuzz through its entry point with the ordinary
// compiler, and checks their naming: valid_* parse, bad_* are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <span>

#include "convert/safetensors.h"
#include "corpus_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(safetensors_fuzz_corpus, replay) {
  int valid = 0, bad = 0;
  for (const auto& [name, bytes] :
       tandem::test::corpus_files(std::filesystem::path(TANDEM_FUZZ_CORPUS_DIR) / "safetensors")) {
    SCOPED_TRACE(name);
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    EXPECT_EQ(LLVMFuzzerTestOneInput(p, bytes.size()), 0);
    const auto f = tandem::safetensors_file::parse(std::span<const uint8_t>(p, bytes.size()), name);
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_TRUE(f.ok()) << f.message();
      ++valid;
    } else if (name.rfind("bad_", 0) == 0) {
      EXPECT_FALSE(f.ok());
      ++bad;
    }
  }
  EXPECT_GE(valid, 3);
  EXPECT_GE(bad, 3);
}

}  // namespace
