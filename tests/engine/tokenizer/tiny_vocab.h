// A small byte-level vocabulary for unit tests: the 256 byte tokens, a few merges and added
// tokens, so tests do not depend on real vocabulary files.
#pragma once

#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer_vocab.h"

namespace tandem::test {

// ids 0..255: byte b; then merges (in rank order) "h e", "l l", "he ll", "hell o", "Ġ w", "a a";
// ids 256.. the merge results "he", "ll", "hell", "hello", "Ġw", "aa"; then "<|end|>" (control)
// and "<think>" (user defined).
inline tokenizer_vocab tiny_vocab() {
  tokenizer_vocab v;
  v.pre = "qwen2";
  for (unsigned b = 0; b < 256; ++b) {
    v.tokens.push_back(bytes_to_byte_level(std::string(1, static_cast<char>(b))));
  }
  for (const char* m : {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "a a"}) {
    std::string s = m;
    v.merges.push_back(s);
    s.erase(s.find(' '), 1);
    v.tokens.push_back(s);
  }
  v.tokens.push_back("<|end|>");
  v.tokens.push_back("<think>");
  v.types.assign(v.tokens.size(), token_type::normal);
  v.types[v.tokens.size() - 2] = token_type::control;
  v.types[v.tokens.size() - 1] = token_type::user_defined;
  v.eos_id = static_cast<int32_t>(v.tokens.size() - 2);
  return v;
}

}  // namespace tandem::test
