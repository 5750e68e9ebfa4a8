// GGUF <-> tokenizer_vocab, plus tokenizer::from_gguf.
#include "tokenizer/vocab_gguf.h"

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

namespace {

// Reads an optional token id: absent is -1, present but out of the int32 range is an error.
status read_id(const gguf_file& f, const char* key, int32_t& out) {
  if (!f.find(key)) return {};
  auto v = f.get_int(key);
  if (!v) return v.err();
  if (*v < -1 || *v > 0x7FFFFFFF) return make_error(key, " = ", *v, " is not a token id");
  out = static_cast<int32_t>(*v);
  return {};
}

}  // namespace

result<tokenizer_vocab> vocab_from_gguf(const gguf_file& f) {
  tokenizer_vocab v;
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return model.err();
  v.model = std::move(*model);
  auto pre = f.get_string("tokenizer.ggml.pre");
  if (!pre) return pre.err();
  v.pre = std::move(*pre);
  auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) return tokens.err();
  v.tokens = std::move(*tokens);
  if (f.find("tokenizer.ggml.token_type")) {
    auto types = f.get_int_array("tokenizer.ggml.token_type");
    if (!types) return types.err();
    v.types.reserve(types->size());
    for (int64_t t : *types) {
      if (t < 0 || t > 6) return make_error("tokenizer.ggml.token_type holds unknown type ", t);
      v.types.push_back(static_cast<token_type>(t));
    }
  } else {
    v.types.assign(v.tokens.size(), token_type::normal);
  }
  if (f.find("tokenizer.ggml.merges")) {
    auto merges = f.get_string_array("tokenizer.ggml.merges");
    if (!merges) return merges.err();
    v.merges = std::move(*merges);
  }
  TANDEM_TRY(read_id(f, "tokenizer.ggml.bos_token_id", v.bos_id));
  TANDEM_TRY(read_id(f, "tokenizer.ggml.eos_token_id", v.eos_id));
  TANDEM_TRY(read_id(f, "tokenizer.ggml.eot_token_id", v.eot_id));
  TANDEM_TRY(read_id(f, "tokenizer.ggml.padding_token_id", v.pad_id));
  if (f.find("tokenizer.ggml.add_bos_token")) {
    auto b = f.get_bool("tokenizer.ggml.add_bos_token");
    if (!b) return b.err();
    v.add_bos = *b;
  }
  if (f.find("tokenizer.chat_template")) {
    auto t = f.get_string("tokenizer.chat_template");
    if (!t) return t.err();
    v.chat_template = std::move(*t);
  }
  return v;
}

void write_vocab(gguf_writer& w, const tokenizer_vocab& v) {
  w.set_string("tokenizer.ggml.model", v.model);
  w.set_string("tokenizer.ggml.pre", v.pre);
  w.set("tokenizer.ggml.tokens", gguf_string_array(v.tokens));
  std::vector<int32_t> types;
  types.reserve(v.types.size());
  for (token_type t : v.types) types.push_back(static_cast<int32_t>(t));
  w.set("tokenizer.ggml.token_type", gguf_i32_array(types));
  w.set("tokenizer.ggml.merges", gguf_string_array(v.merges));
  auto id = [&](const char* key, int32_t value) {
    if (value >= 0) w.set_u32(key, static_cast<uint32_t>(value));
  };
  id("tokenizer.ggml.bos_token_id", v.bos_id);
  id("tokenizer.ggml.eos_token_id", v.eos_id);
  id("tokenizer.ggml.eot_token_id", v.eot_id);
  id("tokenizer.ggml.padding_token_id", v.pad_id);
  w.set_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  if (!v.chat_template.empty()) w.set_string("tokenizer.chat_template", v.chat_template);
}

result<tokenizer> tokenizer::from_gguf(const gguf_file& file) {
  auto v = vocab_from_gguf(file);
  if (!v) return v.err();
  return from_vocab(std::move(*v));
}

}  // namespace tandem
