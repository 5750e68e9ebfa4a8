// GPT-2 byte <-> unicode map, computed once into tables.
#include "tokenizer/byte_unicode.h"

#include <array>

#include "tokenizer/unicode_text.h"

namespace tandem {

namespace {

bool printable_latin1(unsigned b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct byte_tables {
  std::array<char32_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};  // code points 0..323 cover the whole map
  byte_tables() {
    to_byte.fill(-1);
    unsigned next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      to_cp[b] = printable_latin1(b) ? b : next++;
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const byte_tables tables;

}  // namespace

char32_t byte_to_unicode(uint8_t b) { return tables.to_cp[b]; }

std::optional<uint8_t> unicode_to_byte(char32_t cp) {
  if (cp >= tables.to_byte.size() || tables.to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(tables.to_byte[cp]);
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_to_unicode(static_cast<uint8_t>(c)));
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    // The map only reaches U+0143, so one- and two-byte sequences are all that can occur.
    char32_t cp;
    if (p[i] < 0x80) {
      cp = p[i];
      i += 1;
    } else if (utf8_sequence_length(p[i]) == 2 && i + 1 < text.size() && (p[i + 1] & 0xC0) == 0x80) {
      cp = (static_cast<char32_t>(p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F);
      i += 2;
    } else {
      return std::nullopt;
    }
    auto b = unicode_to_byte(cp);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace tandem
