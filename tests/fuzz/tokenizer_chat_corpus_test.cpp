// Replays the committed seeds of tokenizer_chat_fuzz through its entry point with the ordinary
// compiler (its checks trap on a failure).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

TEST(tokenizer_chat_fuzz_corpus, replay) {
  const fs::path dir = fs::path(TANDEM_FUZZ_CORPUS_DIR) / "tokenizer_chat";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(e.path().filename().string());
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(text.data()), text.size()), 0);
    ++n;
  }
  EXPECT_GE(n, 5);
}

}  // namespace
