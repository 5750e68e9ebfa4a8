// A mapped file's descriptor beside its mapping: bytes of the mapping can then be read with
// pread(), which copies from the page cache without faulting the mapping's pages in one by one
// (the weight upload's fast path, backend/cuda/cuda_upload.h).
#pragma once

#include <cstdint>

namespace tandem {

struct file_source {
  int fd = -1;                   // -1: none (bytes parsed from memory)
  const uint8_t* base = nullptr;  // the mapping of the whole file, from offset 0
  uint64_t size = 0;
  // Whether [p, p + n) lies in the mapping, so that it can be read at offset p - base instead.
  bool covers(const uint8_t* p, uint64_t n) const {
    return fd >= 0 && p >= base && n <= size && uint64_t(p - base) <= size - n;
  }
};

}  // namespace tandem
