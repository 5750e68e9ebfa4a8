// The hand-written splitters against HF tokenizers' regex splits of the reference corpus (all
// four pre-tokenizers, including qwen35, for which no vocabulary is available), plus spot checks.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "tokenizer/pre_tokenizer.h"

namespace tandem {
namespace {

std::vector<std::string> split(pre_type t, const std::string& text) {
  decoded_text d;
  EXPECT_TRUE(decode_utf8(text, d).ok());
  std::vector<size_t> ends;
  pre_tokenize(t, d, 0, d.cps.size(), ends);
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e : ends) {
    out.push_back(text.substr(d.offsets[b], d.offsets[e] - d.offsets[b]));
    b = e;
  }
  return out;
}

using v = std::vector<std::string>;

TEST(pre_tokenizer, qwen2_spot_checks) {
  EXPECT_EQ(split(pre_type::qwen2, "Hello world"), (v{"Hello", " world"}));
  EXPECT_EQ(split(pre_type::qwen2, "it'S x'LLe"), (v{"it", "'S", " x", "'LL", "e"}));
  EXPECT_EQ(split(pre_type::qwen2, "a  b"), (v{"a", " ", " b"}));
  EXPECT_EQ(split(pre_type::qwen2, "  \n  \n  x"), (v{"  \n  \n", " ", " x"}));
  EXPECT_EQ(split(pre_type::qwen2, "x   "), (v{"x", "   "}));
  EXPECT_EQ(split(pre_type::qwen2, "1234"), (v{"1", "2", "3", "4"}));
  EXPECT_EQ(split(pre_type::qwen2, " (x);\n"), (v{" (", "x", ");\n"}));
}

TEST(pre_tokenizer, llama3_groups_three_digits) {
  EXPECT_EQ(split(pre_type::llama3, "1234567"), (v{"123", "456", "7"}));
}

TEST(pre_tokenizer, smollm_isolates_digits_and_uses_gpt2_rules) {
  EXPECT_EQ(split(pre_type::smollm, "a 12 b"), (v{"a", " ", "1", "2", " b"}));
  EXPECT_EQ(split(pre_type::smollm, "IT'S it's"), (v{"IT", "'", "S", " it", "'s"}));
}

TEST(pre_tokenizer, qwen35_keeps_marks_with_letters) {
  EXPECT_EQ(split(pre_type::qwen35, "e\xCC\x81x"), (v{"e\xCC\x81x"}));
  EXPECT_EQ(split(pre_type::qwen2, "e\xCC\x81x"), (v{"e", "\xCC\x81x"}));
}

TEST(pre_tokenizer, names) {
  EXPECT_EQ(*pre_type_from_name("llama-bpe"), pre_type::llama3);
  auto bad = pre_type_from_name("tekken");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("tekken"), std::string::npos);
}

TEST(pre_tokenizer, matches_hf_regex_splits_on_the_corpus) {
  const std::string dir = std::string(TANDEM_SOURCE_DIR) + "/tests/reference/tokenizer/";
  std::ifstream cf(dir + "corpus.jsonl"), rf(dir + "reference_ids.json");
  ASSERT_TRUE(cf && rf) << "reference files missing in " << dir;
  std::vector<std::string> corpus;
  for (std::string line; std::getline(cf, line);) {
    if (!line.empty()) corpus.push_back(nlohmann::json::parse(line).get<std::string>());
  }
  const auto ref = nlohmann::json::parse(rf);
  const auto& splits = ref.at("pre_splits");
  ASSERT_EQ(splits.size(), 4u);
  for (const auto& [name, lines] : splits.items()) {
    auto type = pre_type_from_name(name);
    ASSERT_TRUE(type.ok()) << type.message();
    ASSERT_EQ(lines.size(), corpus.size());
    size_t matched = 0;
    for (size_t i = 0; i < corpus.size(); ++i) {
      const auto want = lines[i].get<std::vector<std::string>>();
      const auto got = split(*type, corpus[i]);
      EXPECT_EQ(got, want) << name << " line " << i;
      matched += got == want;
    }
    EXPECT_EQ(matched, corpus.size()) << name;
  }
}

}  // namespace
}  // namespace tandem
