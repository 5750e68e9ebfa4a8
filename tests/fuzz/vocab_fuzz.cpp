// libFuzzer target for a vocabulary as an untrusted GGUF file brings it (tokenizer.ggml.*):
// tokenizer::from_vocab must refuse what it cannot index, and a tokenizer it builds must encode
// and decode without a crash, giving only ids inside the vocabulary. A crash, a sanitizer report
// or a trap is a bug. Also built without libFuzzer as the corpus replay test
// (vocab_fuzz_corpus_test).
//
// Input: byte 0 picks the pre-tokenizer name (and garbage), byte 1 flags (bit 0: add the 256
// byte-level tokens first, bit 1: add_bos), bytes 2..5 the bos/eos ids (0xff: none); then lines:
// "N text" a normal token, "C text" control, "U text" user-defined, "B text" byte, "M a b" a
// merge; other lines are texts to encode.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace tandem;

[[noreturn]] void bug() { __builtin_trap(); }

void exercise(const tokenizer& tok, std::string_view text) {
  for (bool special : {false, true}) {
    auto ids = tok.encode(text, {.parse_special = special, .add_bos = special});
    if (!ids) continue;  // text that is not valid UTF-8, or a byte the vocabulary cannot spell
    for (int32_t id : *ids)
      if (!tok.is_valid_id(id)) bug();
    if (!tok.decode(*ids)) bug();
    stream_decoder dec(tok, special);
    for (int32_t id : *ids)
      if (!dec.push(id)) bug();
    (void)dec.finish();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 6) return 0;
  static const char* const pres[] = {"qwen2", "qwen35", "llama-bpe", "smollm", "gpt-9", ""};
  tokenizer_vocab v;
  v.pre = pres[data[0] % 6];
  if (data[1] & 1)
    for (int b = 0; b < 256; ++b) {
      v.tokens.push_back(bytes_to_byte_level(std::string(1, static_cast<char>(b))));
      v.types.push_back(token_type::normal);
    }
  v.add_bos = data[1] & 2;
  const auto id = [&](uint8_t b) { return b == 0xff ? -1 : static_cast<int32_t>(b) * 3 - 7; };
  v.bos_id = id(data[2]), v.eos_id = id(data[3]), v.eot_id = id(data[4]), v.pad_id = id(data[5]);
  std::vector<std::string> texts;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 6, size - 6);
  for (size_t pos = 0; pos <= rest.size();) {
    const size_t nl = std::min(rest.find('\n', pos), rest.size());
    const std::string_view line = rest.substr(pos, nl - pos);
    pos = nl + 1;
    const std::string body(line.size() >= 2 && line[1] == ' ' ? line.substr(2) : line);
    const char kind = line.size() >= 2 && line[1] == ' ' ? line[0] : 0;
    const token_type type = kind == 'N'   ? token_type::normal
                            : kind == 'C' ? token_type::control
                            : kind == 'U' ? token_type::user_defined
                            : kind == 'B' ? token_type::byte
                                          : token_type::undefined;
    if (kind == 'M') {
      v.merges.push_back(body);
    } else if (type != token_type::undefined) {
      v.tokens.push_back(body);
      v.types.push_back(type);
    } else {
      texts.push_back(body);
    }
  }
  auto tok = tokenizer::from_vocab(std::move(v));
  if (!tok) return 0;
  for (const char* fixed : {"Hello world", "  \n\t x", "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd", "<|im_end|>", "12345"})
    exercise(*tok, fixed);
  for (const std::string& t : texts) exercise(*tok, t);
  return 0;
}
