// A bounded little-endian byte cursor over a span: every read checks the bytes remaining and a
// failed read leaves the position unchanged. Private to the GGUF reader (and its tests).
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>

namespace tandem {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

class gguf_cursor {
 public:
  explicit gguf_cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  // Reads a trivially copyable scalar stored little-endian; false when fewer than sizeof(T) remain.
  template <class T>
  bool read(T& out) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (remaining() < sizeof(T)) return false;
    std::memcpy(&out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  // A view of the next n bytes; false when fewer than n remain.
  bool read_bytes(uint64_t n, std::string_view& out) {
    if (n > remaining()) return false;
    out = std::string_view(reinterpret_cast<const char*>(bytes_.data() + pos_),
                           static_cast<size_t>(n));
    pos_ += n;
    return true;
  }

  bool skip(uint64_t n) {
    if (n > remaining()) return false;
    pos_ += n;
    return true;
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

// Rounds x up to a multiple of align (a power of two); false when the result overflows.
inline bool gguf_align_up(uint64_t x, uint64_t align, uint64_t& out) {
  uint64_t rem = x & (align - 1);
  if (rem == 0) {
    out = x;
    return true;
  }
  uint64_t pad = align - rem;
  if (x > UINT64_MAX - pad) return false;
  out = x + pad;
  return true;
}

}  // namespace tandem
