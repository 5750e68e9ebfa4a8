// Tensor producers for gguf_writer: each fills one tensor's bytes row by row on several threads,
// holding only a row of floats per thread, so models larger than RAM stream to disk.
#pragma once

#include <cstdint>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

namespace tandem {

// Random weights: N(0, std_dev^2) from the tensor's seeded per-row streams, or all ones (norms).
gguf_writer::producer random_producer(ggml_type type, uint64_t row_len, uint64_t n_rows,
                                      uint64_t seed, float std_dev, bool ones, unsigned threads);

// `src` (which must outlive the producer) converted to `type`: copied when the type is the same,
// else dequantized and requantized row by row.
gguf_writer::producer convert_producer(const gguf_tensor& src, ggml_type type, unsigned threads);

}  // namespace tandem
