// Tensor producers for gguf_writer: each fills one tensor's bytes row by row on several threads,
// holding only a row of floats per thread, so models larger than RAM stream to disk.
#pragma once

#include <cstdint>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

namespace tandem {

// Random weights: N(0, std_dev^2) from the tensor's seeded per-row streams, or all ones (norms).
// pool_rows > 0: only the first pool_rows rows are drawn and quantized, and every row of the tensor
// is a copy of one of them picked by a hash of its index (a file written at the speed of memory
// copies, for throughput benchmarks where only the shape, type and bytes matter).
gguf_writer::producer random_producer(ggml_type type, uint64_t row_len, uint64_t n_rows, uint64_t seed,
                                      float std_dev, bool ones, unsigned threads, uint64_t pool_rows = 0);

// `src` (which must outlive the producer) converted to `type`: copied when the type is the same,
// else dequantized and requantized row by row.
gguf_writer::producer convert_producer(const gguf_tensor& src, ggml_type type, unsigned threads);

}  // namespace tandem
