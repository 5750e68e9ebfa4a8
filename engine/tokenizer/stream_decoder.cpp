// Streaming detokenizer: splits byte output at UTF-8 character boundaries.
#include "tokenizer/stream_decoder.h"

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace tandem {

namespace {

constexpr std::string_view replacement = "\xEF\xBF\xBD";

// True when b can follow lead as the second byte of a valid sequence (the ranges that exclude
// overlong forms, surrogates and values past U+10FFFF).
bool valid_second(uint8_t lead, uint8_t b) {
  if ((b & 0xC0) != 0x80) return false;
  if (lead == 0xE0) return b >= 0xA0;
  if (lead == 0xED) return b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90;
  if (lead == 0xF4) return b <= 0x8F;
  return true;
}

}  // namespace

std::string stream_decoder::push_bytes(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  const auto* p = reinterpret_cast<const uint8_t*>(pending_.data());
  const size_t n = pending_.size();
  size_t i = 0;
  while (i < n) {
    const int len = utf8_sequence_length(p[i]);
    if (len == 0) {  // a stray continuation byte or an impossible lead
      out += replacement;
      ++i;
      continue;
    }
    // Check what is there of the sequence; stop (keep it pending) if it is merely unfinished.
    int have = 1;
    bool bad = false;
    while (have < len && i + have < n) {
      const uint8_t b = p[i + have];
      if (have == 1 ? !valid_second(p[i], b) : (b & 0xC0) != 0x80) {
        bad = true;
        break;
      }
      ++have;
    }
    if (bad) {  // the lead and the valid bytes so far are one maximal bad subpart: one U+FFFD
      out += replacement;
      i += static_cast<size_t>(have);
      continue;
    }
    if (have < len) break;  // unfinished: wait for more bytes
    out.append(pending_, i, static_cast<size_t>(len));
    i += static_cast<size_t>(len);
  }
  pending_.erase(0, i);
  return out;
}

result<std::string> stream_decoder::push(int32_t id) {
  if (!tok_->is_valid_id(id)) {
    return make_error("token id ", id, " is outside the vocabulary of ", tok_->size());
  }
  if (skip_control_ && tok_->type_of(id) == token_type::control) return std::string();
  return push_bytes(tok_->token_bytes(id));
}

std::string stream_decoder::finish() {
  std::string out = pending_.empty() ? std::string() : std::string(replacement);
  pending_.clear();
  return out;
}

}  // namespace tandem
