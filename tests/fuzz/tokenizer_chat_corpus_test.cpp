// Replays the committed seeds of tokenizer_chat_fuzz through its entry point with the ordinary
// compiler (its checks trap on a failure).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>

#include "corpus_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

TEST(tokenizer_chat_fuzz_corpus, replay) {
  const auto dir = std::filesystem::path(TANDEM_FUZZ_CORPUS_DIR) / "tokenizer_chat";
  EXPECT_GE(tandem::test::replay_corpus(dir, LLVMFuzzerTestOneInput).size(), 5u);
}
