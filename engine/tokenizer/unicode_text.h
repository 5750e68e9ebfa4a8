// UTF-8 decoding and the Unicode character classes the pre-tokenizers need (letter, number, mark,
// white space), plus NFC normalisation; classes and composition come from utf8proc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace tandem {

// Bit flags describing one code point, as the split regexes see it.
enum char_class : uint8_t {
  cc_letter = 1,      // \p{L}
  cc_number = 2,      // \p{N}
  cc_mark = 4,        // \p{M}
  cc_space = 8,       // \s (Unicode White_Space, as Oniguruma and Rust's regex use it)
  cc_newline = 16,    // \r or \n
};

uint8_t classify_code_point(char32_t cp);

// A decoded segment: code points, their classes, and the byte offset where each starts (one
// extra entry holds the total length), so splits map back to byte ranges of the original.
struct decoded_text {
  std::vector<char32_t> cps;
  std::vector<uint8_t> classes;
  std::vector<uint32_t> offsets;
};

// Decodes strictly: overlong forms, surrogates and truncated sequences are errors naming the byte.
status decode_utf8(std::string_view text, decoded_text& out);

// Checks UTF-8 without decoding into vectors; the error names the first bad byte.
status validate_utf8(std::string_view text);

// Length of the complete UTF-8 sequence starting with this lead byte (1..4), or 0 if it cannot
// start one.
int utf8_sequence_length(uint8_t lead);

void append_utf8(std::string& out, char32_t cp);

// NFC (canonical composition, stable). ASCII input is returned unchanged without calling utf8proc.
result<std::string> nfc_normalize(std::string_view text);

}  // namespace tandem
