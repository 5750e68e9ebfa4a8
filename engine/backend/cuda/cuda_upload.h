// Host-to-device copies of many byte ranges through pinned staging, several threads at once. One
// thread copying out of a mapped file reaches ~7 GB/s (page-cache reads and faults), an eighth of
// what PCIe moves from pinned memory; threads that fill their own buffers (reading the file where
// they can) and queue their own copies go faster.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/file_source.h"
#include "core/load_progress.h"
#include "core/result.h"

namespace tandem {

// n_rows pieces of len bytes, src_pitch apart on the host, packed back to back at dst (a column
// cut of a matrix); n_rows 1 for a plain range.
struct upload_piece {
  uint8_t* dst = nullptr;
  const uint8_t* src = nullptr;
  uint64_t n_rows = 1;
  uint64_t src_pitch = 0;
  uint64_t len = 0;
  uint64_t bytes() const { return n_rows * len; }
};

struct upload_options {
  int device = 0;
  size_t slot_bytes = 32ull << 20;    // each of a thread's two pinned buffers
  int threads = 0;                    // 0: TANDEM_CUDA_UPLOAD_THREADS, else k_default_upload_threads
  load_progress* progress = nullptr;  // gets add(bytes) as pieces are queued
  // The file the sources are mapped from: plain ranges inside it are read with pread() (no page
  // faults) instead of copied out of the mapping. None: every piece is copied from memory.
  file_source file;
};

constexpr int k_default_upload_threads = 4;

// The thread count `requested` means (see upload_options::threads).
int upload_threads(int requested);

// Copies every piece to the device; returns once all have arrived, or with the first error (the
// other threads stop at their next piece).
status upload_pieces(const std::vector<upload_piece>& pieces, const upload_options& opt);

}  // namespace tandem
