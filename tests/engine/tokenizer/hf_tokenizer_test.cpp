// Hugging Face tokenizer.json import: a small valid file, and clear errors for what is unsupported.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tandem {
namespace {

using json = nlohmann::json;

// A Qwen2-style tokenizer.json with the 256 byte tokens, one merge and two added tokens.
json small_qwen_json() {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[bytes_to_byte_level(std::string(1, char(b)))] = b;
  vocab["ab"] = 256;
  const std::string re =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return {
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({json::array({"a", "b"})})}, {"ignore_merges", false}}},
      {"added_tokens",
       {{{"id", 257}, {"content", "<|im_end|>"}, {"special", true}},
        {{"id", 258}, {"content", "<think>"}, {"special", false}}}},
  };
}

TEST(hf_tokenizer, imports_a_qwen_style_file) {
  const json cfg = {{"eos_token", "<|im_end|>"}, {"chat_template", "{{ '<|im_start|>' }}"},
                    {"bos_token", nullptr}};
  auto v = vocab_from_hf_json(small_qwen_json().dump(), cfg.dump());
  ASSERT_TRUE(v.ok()) << v.message();
  EXPECT_EQ(v->pre, "qwen2");
  EXPECT_EQ(v->tokens.size(), 259u);
  EXPECT_EQ(v->types[257], token_type::control);
  EXPECT_EQ(v->types[258], token_type::user_defined);
  EXPECT_EQ(v->eos_id, 257);
  EXPECT_EQ(v->bos_id, -1);
  EXPECT_EQ(v->merges, std::vector<std::string>{"a b"});
  EXPECT_EQ(v->chat_template, "{{ '<|im_start|>' }}");
  auto tok = tokenizer::from_vocab(std::move(*v));
  ASSERT_TRUE(tok.ok()) << tok.message();
  EXPECT_EQ(*tok->encode("ab<|im_end|>", {.parse_special = true}), (std::vector<int32_t>{256, 257}));
}

TEST(hf_tokenizer, reports_what_is_unsupported) {
  EXPECT_NE(vocab_from_hf_json("{not json", "").message().find("not valid JSON"), std::string::npos);

  json j = small_qwen_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  EXPECT_NE(vocab_from_hf_json(j.dump(), "").message().find("unsupported split regex"),
            std::string::npos);

  j = small_qwen_json();
  j["normalizer"] = nullptr;
  EXPECT_NE(vocab_from_hf_json(j.dump(), "").message().find("normalizer"), std::string::npos);

  j = small_qwen_json();
  j["model"]["type"] = "Unigram";
  EXPECT_NE(vocab_from_hf_json(j.dump(), "").message().find("not BPE"), std::string::npos);

  j = small_qwen_json();
  j["model"]["ignore_merges"] = true;
  EXPECT_NE(vocab_from_hf_json(j.dump(), "").message().find("ignore_merges"), std::string::npos);

  const json cfg = {{"eos_token", "<|nope|>"}};
  EXPECT_NE(vocab_from_hf_json(small_qwen_json().dump(), cfg.dump()).message().find("<|nope|>"),
            std::string::npos);
  EXPECT_NE(vocab_from_hf_files("/nonexistent/tokenizer.json").message().find("cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem
