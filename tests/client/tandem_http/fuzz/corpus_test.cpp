// Replays the committed seed corpus of fuzz_openai_request through its entry point with the
// ordinary compiler, and checks the seeds' naming: chat_* and completion_* are accepted by that
// endpoint's mapping, bad_* by neither.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <variant>

#include "corpus_files.h"
#include "openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

using tandem::http::api_kind;

bool accepted(api_kind kind, const std::string& body) {
  return std::holds_alternative<tandem::http::generate_call>(tandem::http::parse_generate(kind, body));
}

TEST(openai_fuzz_corpus, replay) {
  int chat = 0, completion = 0, bad = 0;
  for (const auto& [name, body] : tandem::test::replay_corpus(TANDEM_OPENAI_CORPUS_DIR, LLVMFuzzerTestOneInput)) {
    SCOPED_TRACE(name);
    if (name.rfind("chat_", 0) == 0) {
      EXPECT_TRUE(accepted(api_kind::chat, body));
      ++chat;
    } else if (name.rfind("completion_", 0) == 0) {
      EXPECT_TRUE(accepted(api_kind::completion, body));
      ++completion;
    } else if (name.rfind("bad_", 0) == 0) {
      EXPECT_FALSE(accepted(api_kind::chat, body));
      EXPECT_FALSE(accepted(api_kind::completion, body));
      ++bad;
    }
  }
  EXPECT_GE(chat, 2);
  EXPECT_GE(completion, 2);
  EXPECT_GE(bad, 1);
}

}  // namespace
