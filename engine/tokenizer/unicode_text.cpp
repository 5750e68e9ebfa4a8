// UTF-8 decoding, character classes and NFC for the tokenizer, built on utf8proc.
#include "tokenizer/unicode_text.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>

namespace tandem {

namespace {

bool is_white_space(char32_t cp) {
  // The Unicode White_Space property: what \s matches in Oniguruma (HF tokenizers) and Rust regex.
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

uint8_t classify_slow(char32_t cp) {
  uint8_t c = 0;
  if (is_white_space(cp)) c |= cc_space;
  if (cp == '\r' || cp == '\n') c |= cc_newline;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
      c |= cc_letter;
      break;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
      c |= cc_mark;
      break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      c |= cc_number;
      break;
    default:
      break;
  }
  return c;
}

// ASCII dominates prose and code; a table keeps its classification out of utf8proc.
const std::array<uint8_t, 128> ascii_classes = [] {
  std::array<uint8_t, 128> t{};
  for (char32_t cp = 0; cp < 128; ++cp) t[cp] = classify_slow(cp);
  return t;
}();

}  // namespace

uint8_t classify_code_point(char32_t cp) {
  return cp < 128 ? ascii_classes[cp] : classify_slow(cp);
}

int utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

status decode_utf8(std::string_view text, decoded_text& out) {
  out.cps.clear();
  out.classes.clear();
  out.offsets.clear();
  out.cps.reserve(text.size());
  out.classes.reserve(text.size());
  out.offsets.reserve(text.size() + 1);
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    char32_t cp = p[i];
    int len = 1;
    if (cp >= 0x80) {
      len = utf8_sequence_length(p[i]);
      if (len == 0 || i + len > n) {
        return make_error("text is not valid UTF-8 at byte ", i);
      }
      cp = p[i] & (0x7F >> len);
      for (int k = 1; k < len; ++k) {
        if ((p[i + k] & 0xC0) != 0x80) return make_error("text is not valid UTF-8 at byte ", i);
        cp = (cp << 6) | (p[i + k] & 0x3F);
      }
      // Overlong three/four-byte forms, surrogates and values past U+10FFFF.
      if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
          (cp >= 0xD800 && cp <= 0xDFFF)) {
        return make_error("text is not valid UTF-8 at byte ", i);
      }
    }
    out.cps.push_back(cp);
    out.classes.push_back(classify_code_point(cp));
    out.offsets.push_back(static_cast<uint32_t>(i));
    i += static_cast<size_t>(len);
  }
  out.offsets.push_back(static_cast<uint32_t>(n));
  return {};
}

status validate_utf8(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int len = utf8_sequence_length(p[i]);
    if (len == 0 || i + len > n) return make_error("text is not valid UTF-8 at byte ", i);
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return make_error("text is not valid UTF-8 at byte ", i);
    }
    // Second-byte limits exclude overlong forms, surrogates and values past U+10FFFF.
    if ((p[i] == 0xE0 && p[i + 1] < 0xA0) || (p[i] == 0xED && p[i + 1] > 0x9F) ||
        (p[i] == 0xF0 && p[i + 1] < 0x90) || (p[i] == 0xF4 && p[i + 1] > 0x8F)) {
      return make_error("text is not valid UTF-8 at byte ", i);
    }
    i += static_cast<size_t>(len);
  }
  return {};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

result<std::string> nfc_normalize(std::string_view text) {
  bool ascii = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(text);
  utf8proc_uint8_t* dst = nullptr;
  utf8proc_ssize_t len =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &dst,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (len < 0) {
    return make_error("NFC normalisation failed: ", utf8proc_errmsg(len));
  }
  std::string out(reinterpret_cast<const char*>(dst), static_cast<size_t>(len));
  std::free(dst);
  return out;
}

}  // namespace tandem
