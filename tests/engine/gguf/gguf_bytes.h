// A tiny little-endian byte builder for hand-made (often malformed) GGUF files in tests and the
// fuzz corpus generator. Header-only, no test framework dependency.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string_view>
#include <vector>

namespace tandem::test {

class gguf_bytes {
 public:
  std::vector<uint8_t> b;

  size_t size() const { return b.size(); }

  template <class T>
  gguf_bytes& put(T x) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &x, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  gguf_bytes& u8(uint8_t x) { return put(x); }
  gguf_bytes& u32(uint32_t x) { return put(x); }
  gguf_bytes& u64(uint64_t x) { return put(x); }
  gguf_bytes& raw(std::string_view s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  gguf_bytes& str(std::string_view s) { return u64(s.size()).raw(s); }
  gguf_bytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
  gguf_bytes& fill(size_t n, uint8_t v) {
    b.insert(b.end(), n, v);
    return *this;
  }
  gguf_bytes& pad_to(uint64_t align) {
    while (b.size() % align != 0) b.push_back(0);
    return *this;
  }

  gguf_bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  // KV key and type; the caller appends the value.
  gguf_bytes& key(std::string_view k, uint32_t type) { return str(k).u32(type); }
  gguf_bytes& kv_u32(std::string_view k, uint32_t v) { return key(k, 4).u32(v); }
  gguf_bytes& kv_string(std::string_view k, std::string_view v) { return key(k, 8).str(v); }

  gguf_bytes& tensor_info(std::string_view name, std::initializer_list<uint64_t> dims,
                          uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
};

}  // namespace tandem::test
