// GGUF metadata values: type names, convenience constructors and small shared helpers.
#include "gguf/gguf_value.h"

#include "gguf/gguf_internal.h"

namespace tandem {

std::string_view gguf_type_name(gguf_type t) {
  switch (t) {
    case gguf_type::u8:
      return "u8";
    case gguf_type::i8:
      return "i8";
    case gguf_type::u16:
      return "u16";
    case gguf_type::i16:
      return "i16";
    case gguf_type::u32:
      return "u32";
    case gguf_type::i32:
      return "i32";
    case gguf_type::f32:
      return "f32";
    case gguf_type::boolean:
      return "bool";
    case gguf_type::string:
      return "string";
    case gguf_type::array:
      return "array";
    case gguf_type::u64:
      return "u64";
    case gguf_type::i64:
      return "i64";
    case gguf_type::f64:
      return "f64";
  }
  return "unknown";
}

namespace {

template <class T>
gguf_value array_of(gguf_type elem_type, const std::vector<T>& items) {
  gguf_array a;
  a.elem_type = elem_type;
  a.items.reserve(items.size());
  for (const T& x : items) a.items.push_back(gguf_value{x});
  return gguf_value{std::move(a)};
}

}  // namespace

gguf_value gguf_string_array(const std::vector<std::string>& items) { return array_of(gguf_type::string, items); }

gguf_value gguf_i32_array(const std::vector<int32_t>& items) { return array_of(gguf_type::i32, items); }

gguf_value gguf_f32_array(const std::vector<float>& items) { return array_of(gguf_type::f32, items); }

namespace gguf_detail {

uint64_t min_wire_size(gguf_type t) {
  switch (t) {
    case gguf_type::u8:
    case gguf_type::i8:
    case gguf_type::boolean:
      return 1;
    case gguf_type::u16:
    case gguf_type::i16:
      return 2;
    case gguf_type::u32:
    case gguf_type::i32:
    case gguf_type::f32:
      return 4;
    case gguf_type::u64:
    case gguf_type::i64:
    case gguf_type::f64:
    case gguf_type::string:
      return 8;
    case gguf_type::array:
      return 12;
  }
  return 1;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;  // continuation byte, overlong 2-byte lead (C0/C1) or past U+10FFFF
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

std::string printable(std::string_view s) {
  constexpr size_t k_max = 120;
  static const char* hex = "0123456789abcdef";
  std::string out;
  const size_t n = s.size() < k_max ? s.size() : k_max;
  out.reserve(n + 8);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else if (c >= 0xC2 && c <= 0xF4) {
      const size_t len = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;  // keep whole valid UTF-8 sequences
      if (i + len <= n && valid_utf8(s.substr(i, len))) {
        out.append(s.substr(i, len));
        i += len - 1;
      } else {
        out += "\\x";
        out.push_back(hex[c >> 4]);
        out.push_back(hex[c & 15]);
      }
    } else {
      out += "\\x";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  if (n < s.size()) out += "...";
  return out;
}

std::string describe_type(const gguf_value& v) {
  std::string out(gguf_type_name(v.type()));
  if (const auto* a = std::get_if<gguf_array>(&v.v)) {
    out += " of ";
    out += gguf_type_name(a->elem_type);
  }
  return out;
}

}  // namespace gguf_detail
}  // namespace tandem
