// libFuzzer target for the tokenizer and the chat formats on untrusted text, with the Qwen3
// vocabulary of tests/data. A crash, a sanitizer report or a trap is a bug; the traps are:
// - encode refusing valid UTF-8, or taking invalid UTF-8;
// - decode(encode(t)) other than NFC(t), or the stream decoder's pieces, fed id by id, other
//   than that text;
// - a user message adding control tokens to a rendered chat (ChatML, Qwen3, Qwen3.5): its
//   encode_chat holds as many as the same chat with the message "x" (no injection).
// Also built without libFuzzer as the corpus replay test (tokenizer_chat_fuzz_corpus_test).
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace {

using namespace tandem;

[[noreturn]] void bug() { __builtin_trap(); }

std::string gunzip(const char* path) {
  gzFile f = gzopen(path, "rb");
  if (!f) bug();
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  if (n < 0) bug();
  return out;
}

const tokenizer& qwen3() {
  static const tokenizer tok = [] {
    const std::string dir = TANDEM_QWEN3_TOKENIZER_DIR;
    auto vocab = vocab_from_hf_json(gunzip((dir + "/tokenizer.json.gz").c_str()), "");
    if (!vocab) bug();
    auto t = tokenizer::from_vocab(std::move(*vocab));
    if (!t) bug();
    return std::move(*t);
  }();
  return tok;
}

int control_tokens(const tokenizer& tok, const std::vector<int32_t>& ids) {
  int n = 0;
  for (int32_t id : ids) n += tok.type_of(id) == token_type::control;
  return n;
}

void check_round_trip(const tokenizer& tok, std::string_view text) {
  const bool valid = validate_utf8(text).ok();
  auto ids = tok.encode(text);
  if (ids.ok() != valid) bug();
  if (!valid) return;
  auto back = tok.decode(*ids);
  auto want = nfc_normalize(text);
  if (!back || !want || *back != *want) bug();
  stream_decoder dec(tok);
  std::string streamed;
  for (int32_t id : *ids) {
    auto piece = dec.push(id);
    if (!piece) bug();
    streamed += *piece;
  }
  streamed += dec.finish();
  if (streamed != *back) bug();
}

void check_no_injection(const tokenizer& tok, const std::string& text) {
  for (chat_format f : {chat_format::chatml, chat_format::qwen3, chat_format::qwen35}) {
    chat_template tpl;
    tpl.format = f;
    const std::vector<chat_message> fuzzed = {{"system", "s"}, {"user", text}},
                                    plain = {{"system", "s"}, {"user", "x"}};
    auto a = render_chat_text(tpl, fuzzed), b = render_chat_text(tpl, plain);
    if (!a || !b) continue;  // a conversation the format refuses
    auto ia = encode_chat(tok, *a), ib = encode_chat(tok, *b);
    if (!ia || !ib) bug();
    // The template's own turns are control tokens (else the comparison would prove nothing).
    if (control_tokens(tok, *ib) == 0 || control_tokens(tok, *ia) != control_tokens(tok, *ib)) bug();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const tokenizer& tok = qwen3();
  check_round_trip(tok, text);
  if (validate_utf8(text).ok()) check_no_injection(tok, text);
  return 0;
}
