// Streaming detokenizer: never emits part of a UTF-8 character, and bad bytes become U+FFFD.
#include <gtest/gtest.h>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"
#include "tiny_vocab.h"

namespace tandem {
namespace {

bool valid(const std::string& s) { return validate_utf8(s).ok(); }

TEST(stream_decoder, holds_split_characters_until_complete) {
  auto tok = tokenizer::from_vocab(test::tiny_vocab());
  ASSERT_TRUE(tok.ok()) << tok.message();
  // "é😀" byte by byte: every byte is its own token in the tiny vocabulary.
  const std::string text = "\xC3\xA9\xF0\x9F\x98\x80";
  auto ids = tok->encode(text);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 6u);
  stream_decoder dec(*tok);
  std::vector<std::string> chunks;
  for (int32_t id : *ids) {
    auto c = dec.push(id);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(valid(*c));
    chunks.push_back(*c);
  }
  EXPECT_EQ(chunks, (std::vector<std::string>{"", "\xC3\xA9", "", "", "", "\xF0\x9F\x98\x80"}));
  EXPECT_EQ(dec.finish(), "");
}

TEST(stream_decoder, replaces_invalid_bytes) {
  auto tok = tokenizer::from_vocab(test::tiny_vocab());
  ASSERT_TRUE(tok.ok());
  stream_decoder dec(*tok);
  EXPECT_EQ(dec.push_bytes("a\x80" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(dec.push_bytes("\xE2\x82"), "");
  EXPECT_EQ(dec.push_bytes("x"), "\xEF\xBF\xBDx");  // an interrupted sequence is one U+FFFD
  EXPECT_EQ(dec.push_bytes("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(dec.push_bytes("\xF0\x9F"), "");
  EXPECT_EQ(dec.finish(), "\xEF\xBF\xBD");
  EXPECT_FALSE(dec.push(1 << 30).ok());
}

}  // namespace
}  // namespace tandem
