// Tokenizer behaviour on a tiny in-memory vocabulary: merges by rank, the parse_special switch,
// validation errors, and the byte map.
#include <gtest/gtest.h>

#include "tiny_vocab.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer.h"

namespace tandem {
namespace {

constexpr int32_t he = 256, ll = 257, hell = 258, hello = 259, sp_w = 260, aa = 261, end_tok = 262,
                  think = 263;

std::vector<int32_t> enc(const tokenizer& t, std::string_view s, bool special = false) {
  auto r = t.encode(s, {.parse_special = special});
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : std::vector<int32_t>{};
}

TEST(byte_unicode, maps_every_byte_both_ways) {
  for (unsigned b = 0; b < 256; ++b) {
    auto back = unicode_to_byte(byte_to_unicode(static_cast<uint8_t>(b)));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, b);
  }
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);   // Ġ
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);  // Ċ
  EXPECT_EQ(byte_to_unicode('A'), static_cast<char32_t>('A'));
  EXPECT_FALSE(byte_level_to_bytes("\xE4\xB8\xAD").has_value());  // 中 is outside the map
}

TEST(tokenizer, merges_by_rank) {
  auto t = tokenizer::from_vocab(test::tiny_vocab());
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(enc(*t, "hello"), (std::vector<int32_t>{hello}));
  EXPECT_EQ(enc(*t, "hell"), (std::vector<int32_t>{hell}));
  EXPECT_EQ(enc(*t, "helo"), (std::vector<int32_t>{he, 'l', 'o'}));
  EXPECT_EQ(enc(*t, "aaa"), (std::vector<int32_t>{aa, 'a'}));  // leftmost pair first
  EXPECT_EQ(enc(*t, "hello world"), (std::vector<int32_t>{hello, sp_w, 'o', 'r', 'l', 'd'}));
}

TEST(tokenizer, control_tokens_need_parse_special) {
  auto t = tokenizer::from_vocab(test::tiny_vocab());
  ASSERT_TRUE(t.ok());
  auto plain = enc(*t, "a<|end|>");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), end_tok), 0);
  EXPECT_EQ(enc(*t, "a<|end|>", true), (std::vector<int32_t>{'a', end_tok}));
  // User-defined added tokens match either way.
  EXPECT_EQ(enc(*t, "<think>a"), (std::vector<int32_t>{think, 'a'}));
  auto text = t->decode(enc(*t, "a<|end|>", true));
  EXPECT_EQ(*text, "a<|end|>");
  EXPECT_EQ(*t->decode(enc(*t, "a<|end|>", true), /*skip_control=*/true), "a");
  EXPECT_EQ(t->find_token("<|end|>"), end_tok);
}

TEST(tokenizer, rejects_invalid_utf8_and_bad_ids) {
  auto t = tokenizer::from_vocab(test::tiny_vocab());
  ASSERT_TRUE(t.ok());
  auto r = t->encode("ab\xC3(");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("byte 2"), std::string::npos) << r.message();
  EXPECT_FALSE(t->encode("\xED\xA0\x80").ok());  // surrogate
  EXPECT_FALSE(t->encode("\xC0\xAF").ok());      // overlong
  std::vector<int32_t> bad{1, -1};
  EXPECT_FALSE(t->decode(bad).ok());
}

TEST(tokenizer, adds_bos_only_on_request) {
  auto v = test::tiny_vocab();
  v.bos_id = end_tok;
  v.add_bos = true;
  auto t = tokenizer::from_vocab(v);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->wants_bos());
  auto r = t->encode("a", {.add_bos = true});
  EXPECT_EQ(*r, (std::vector<int32_t>{end_tok, 'a'}));
}

TEST(tokenizer, load_errors_are_clear) {
  auto v = test::tiny_vocab();
  v.pre = "nonesuch";
  auto r = tokenizer::from_vocab(v);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("nonesuch"), std::string::npos);

  v = test::tiny_vocab();
  v.merges.push_back("x zz");
  r = tokenizer::from_vocab(v);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("x zz"), std::string::npos) << r.message();

  v = test::tiny_vocab();
  v.types.pop_back();
  EXPECT_FALSE(tokenizer::from_vocab(v).ok());

  v = test::tiny_vocab();
  v.eos_id = 100000;
  EXPECT_FALSE(tokenizer::from_vocab(v).ok());

  v = test::tiny_vocab();
  v.model = "llama";
  EXPECT_FALSE(tokenizer::from_vocab(v).ok());

}

TEST(tokenizer, drops_bytes_without_a_token_like_hf) {
  auto v = test::tiny_vocab();
  v.tokens['A'] = "<unused>";  // byte 'A' has no token any more
  v.types['A'] = token_type::unused;
  auto t = tokenizer::from_vocab(v);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(enc(*t, "hAello A"), (std::vector<int32_t>{hello, ' '}));
}

TEST(tokenizer, qwen_vocabularies_normalise_to_nfc) {
  auto t = tokenizer::from_vocab(test::tiny_vocab());
  ASSERT_TRUE(t.ok());
  // e + combining acute becomes U+00E9 before splitting, as HF's NFC normaliser does.
  auto ids = enc(*t, "e\xCC\x81");
  EXPECT_EQ(*t->decode(ids), "\xC3\xA9");
}

TEST(tokenizer, long_runs_do_not_blow_up) {
  auto t = tokenizer::from_vocab(test::tiny_vocab());
  ASSERT_TRUE(t.ok());
  for (char c : {'a', ' ', 'l'}) {
    const std::string s(100 * 1024, c);
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = enc(*t, s);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(secs, 0.5);
    EXPECT_EQ(*t->decode(ids), s);
  }
}

}  // namespace
}  // namespace tandem
