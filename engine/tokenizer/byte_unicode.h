// GPT-2's byte <-> unicode map: byte-level BPE vocabularies spell every byte as a printable
// code point (printable Latin-1 bytes as themselves, the other 68 as U+0100 upwards).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem {

char32_t byte_to_unicode(uint8_t b);
// The byte a code point stands for, or nothing for code points outside the map.
std::optional<uint8_t> unicode_to_byte(char32_t cp);

// Byte-level spelling of raw bytes ("Ġhello" for " hello").
std::string bytes_to_byte_level(std::string_view bytes);
// Raw bytes of a byte-level string; nothing when it holds a code point outside the map or is
// not valid UTF-8.
std::optional<std::string> byte_level_to_bytes(std::string_view text);

}  // namespace tandem
