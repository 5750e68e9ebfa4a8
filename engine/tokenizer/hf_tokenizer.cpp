// Hugging Face tokenizer.json -> tokenizer_vocab. The pre-tokenizer is recognised by its exact
// split regex (or SmolLM's Digits + ByteLevel sequence) and checked against the normaliser and
// ignore_merges that the C++ tokenizer pairs with it, so a converted model encodes as HF does.
#include "tokenizer/hf_tokenizer.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "tokenizer/pre_tokenizer.h"

namespace tandem {

namespace {

using json = nlohmann::json;

constexpr std::string_view qwen2_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view qwen35_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view llama3_regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string str_or_empty(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool is_byte_level(const json& j, bool use_regex) {
  return j.is_object() && str_or_empty(j, "type") == "ByteLevel" &&
         j.value("use_regex", true) == use_regex && !j.value("add_prefix_space", false);
}

// The pre-tokenizer name for a tokenizer.json pre_tokenizer, or an error describing it.
result<pre_type> detect_pre(const json& pre) {
  if (pre.is_object() && str_or_empty(pre, "type") == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2) {
    const json& a = pre["pretokenizers"][0];
    const json& b = pre["pretokenizers"][1];
    if (str_or_empty(a, "type") == "Split" && is_byte_level(b, false) && a.contains("pattern") &&
        a["pattern"].is_object() && str_or_empty(a, "behavior") == "Isolated" &&
        !a.value("invert", false)) {
      const std::string re = str_or_empty(a["pattern"], "Regex");
      if (re == qwen2_regex) return pre_type::qwen2;
      if (re == qwen35_regex) return pre_type::qwen35;
      if (re == llama3_regex) return pre_type::llama3;
      return make_error("tokenizer.json: unsupported split regex ", re);
    }
    if (str_or_empty(a, "type") == "Digits" && a.value("individual_digits", false) &&
        is_byte_level(b, true)) {
      return pre_type::smollm;
    }
  }
  return make_error("tokenizer.json: unsupported pre_tokenizer ", pre.dump());
}

// The text of a special token entry in tokenizer_config.json: "..." or {"content": "..."}.
std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object()) return str_or_empty(j, "content");
  return {};
}

status read_model(const json& model, tokenizer_vocab& v,
                  std::unordered_map<std::string, int32_t>& ids) {
  if (!model.is_object() || str_or_empty(model, "type") != "BPE") {
    return make_error("tokenizer.json: model is not BPE");
  }
  if (model.value("byte_fallback", false)) {
    return make_error("tokenizer.json: byte_fallback BPE (SentencePiece style) is not supported");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return make_error("tokenizer.json: model.vocab is missing");
  }
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24)) {
      return make_error("tokenizer.json: token '", text, "' has a bad id");
    }
    ids[text] = id.get<int32_t>();
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return make_error("tokenizer.json: model.merges is missing");
  }
  for (const json& m : model["merges"]) {
    // Older files write "a b"; newer ones a two-element array.
    if (m.is_string()) {
      v.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    } else {
      return make_error("tokenizer.json: bad merge entry ", m.dump());
    }
  }
  return {};
}

status read_added(const json& root, std::unordered_map<std::string, int32_t>& ids,
                  std::unordered_map<int32_t, token_type>& types) {
  if (!root.contains("added_tokens") || !root["added_tokens"].is_array()) return {};
  for (const json& a : root["added_tokens"]) {
    const std::string text = str_or_empty(a, "content");
    if (!a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
        a["id"].get<int64_t>() >= (1 << 24) || text.empty()) {
      return make_error("tokenizer.json: bad added token ", a.dump());
    }
    if (a.value("lstrip", false) || a.value("rstrip", false) || a.value("single_word", false)) {
      return make_error("tokenizer.json: added token '", text,
                        "' uses lstrip/rstrip/single_word, which is not supported");
    }
    const int32_t id = a["id"].get<int32_t>();
    ids[text] = id;
    types[id] = a.value("special", false) ? token_type::control : token_type::user_defined;
  }
  return {};
}

status apply_config(const json& cfg, const std::unordered_map<std::string, int32_t>& ids,
                    tokenizer_vocab& v) {
  auto lookup = [&](const char* key, int32_t& out) -> status {
    if (!cfg.contains(key) || cfg[key].is_null()) return {};
    const std::string text = token_text(cfg[key]);
    auto it = ids.find(text);
    if (it == ids.end()) return make_error("tokenizer_config.json: ", key, " '", text, "' is not a token");
    out = it->second;
    return {};
  };
  TANDEM_TRY(lookup("bos_token", v.bos_id));
  TANDEM_TRY(lookup("eos_token", v.eos_id));
  TANDEM_TRY(lookup("pad_token", v.pad_id));
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
    v.add_bos = cfg["add_bos_token"].get<bool>();
  }
  if (cfg.contains("chat_template")) {
    const json& t = cfg["chat_template"];
    if (t.is_string()) {
      v.chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      // Named templates: [{"name": "default", "template": "..."}, ...]; keep the default.
      for (const json& e : t) {
        if (str_or_empty(e, "name") == "default") v.chat_template = str_or_empty(e, "template");
      }
    }
  }
  return {};
}

}  // namespace

result<tokenizer_vocab> vocab_from_hf_json(std::string_view tokenizer_json,
                                           std::string_view config_json) {
  const json root = json::parse(tokenizer_json, nullptr, false);
  if (root.is_discarded() || !root.is_object()) return make_error("tokenizer.json is not valid JSON");
  auto pre = detect_pre(root.value("pre_tokenizer", json()));
  if (!pre) return pre.err();
  tokenizer_vocab v;
  v.pre = std::string(pre_type_name(*pre));
  const json normalizer = root.value("normalizer", json());
  const bool wants_nfc = *pre == pre_type::qwen2 || *pre == pre_type::qwen35;
  const bool has_nfc = normalizer.is_object() && str_or_empty(normalizer, "type") == "NFC";
  if (wants_nfc != has_nfc || (!has_nfc && !normalizer.is_null())) {
    return make_error("tokenizer.json: normalizer ", normalizer.dump(), " does not go with the ",
                      v.pre, " pre-tokenizer (expected ", wants_nfc ? "NFC" : "none", ")");
  }
  const json model = root.value("model", json());
  const bool ignore_merges = model.is_object() && model.value("ignore_merges", false);
  if (ignore_merges != (*pre == pre_type::llama3)) {
    return make_error("tokenizer.json: ignore_merges=", ignore_merges, " does not go with the ",
                      v.pre, " pre-tokenizer");
  }
  std::unordered_map<std::string, int32_t> ids;
  TANDEM_TRY(read_model(model, v, ids));
  std::unordered_map<int32_t, token_type> types;
  TANDEM_TRY(read_added(root, ids, types));
  int32_t n = 0;
  for (const auto& [text, id] : ids) n = std::max(n, id + 1);
  v.tokens.assign(static_cast<size_t>(n), std::string());
  v.types.assign(static_cast<size_t>(n), token_type::undefined);
  for (const auto& [text, id] : ids) {
    v.tokens[id] = text;
    auto t = types.find(id);
    v.types[id] = t != types.end() ? t->second : token_type::normal;
  }
  for (int32_t id = 0; id < n; ++id) {
    if (v.types[id] == token_type::undefined) {  // a hole in the ids: filled as llama.cpp does
      v.tokens[id] = "[PAD" + std::to_string(id) + "]";
      v.types[id] = token_type::unused;
    }
  }
  // A TemplateProcessing post-processor that starts with a special token prepends BOS.
  const json post = root.value("post_processor", json());
  if (post.is_object() && str_or_empty(post, "type") == "TemplateProcessing" &&
      post.contains("single") && post["single"].is_array() && !post["single"].empty() &&
      post["single"][0].is_object() && post["single"][0].contains("SpecialToken")) {
    v.add_bos = true;
  }
  if (!config_json.empty()) {
    const json cfg = json::parse(config_json, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) {
      return make_error("tokenizer_config.json is not valid JSON");
    }
    TANDEM_TRY(apply_config(cfg, ids, v));
  }
  return v;
}

result<tokenizer_vocab> vocab_from_hf_files(const std::string& path) {
  auto slurp = [](const std::filesystem::path& p, std::string& out) -> status {
    std::ifstream in(p, std::ios::binary);
    if (!in) return make_error("cannot open ", p.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    out = ss.str();
    return {};
  };
  std::string tok, cfg;
  TANDEM_TRY(slurp(path, tok));
  const auto cfg_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(cfg_path, ec)) TANDEM_TRY(slurp(cfg_path, cfg));
  auto v = vocab_from_hf_json(tok, cfg);
  if (!v) return make_error(path, ": ", v.message());
  return v;
}

}  // namespace tandem
