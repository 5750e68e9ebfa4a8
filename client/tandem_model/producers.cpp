// Producers for make (random rows) and quantize (converted rows).
#include "producers.h"

#include <algorithm>
#include <cstring>

#include "quant/quant.h"
#include "row_work.h"

namespace tandem {
namespace {

status check_size(std::span<uint8_t> out, ggml_type type, uint64_t row_len, uint64_t n_rows,
                  uint64_t& row_size) {
  auto rb = row_bytes(type, row_len);
  if (!rb) return make_error("row of ", row_len, " elements does not fit type ", type_name(type));
  row_size = *rb;
  if (out.size() != row_size * n_rows)
    return make_error("writer asked for ", out.size(), " bytes, tensor has ", row_size * n_rows);
  return {};
}

// Which of the pool's rows row r copies: a splitmix64 hash, so the copies show no period.
uint64_t pool_row(uint64_t seed, uint64_t r, uint64_t pool) {
  uint64_t z = seed ^ (r * 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) % pool;
}

}  // namespace

gguf_writer::producer random_producer(ggml_type type, uint64_t row_len, uint64_t n_rows, uint64_t seed,
                                      float std_dev, bool ones, unsigned threads, uint64_t pool_rows) {
  return [=](std::span<uint8_t> out) -> status {
    uint64_t rb = 0;
    TANDEM_TRY(check_size(out, type, row_len, n_rows, rb));
    const uint64_t drawn = pool_rows > 0 && pool_rows < n_rows ? pool_rows : n_rows;
    for_each_row_chunk(drawn, threads, row_len, [&](uint64_t first, uint64_t n, float* row) {
      const int64_t len = static_cast<int64_t>(row_len);
      for (uint64_t r = first; r < first + n; ++r) {
        if (ones) std::fill(row, row + len, 1.0f);
        else fill_normal_row(seed, r, std_dev, row, len);
        quantize_row(type, row, out.data() + r * rb, len);
      }
    });
    if (drawn == n_rows) return {};
    // Rows past the pool copy pool rows; the source rows were written above, before any copy.
    for_each_row_chunk(n_rows - drawn, threads, row_len, [&](uint64_t first, uint64_t n, float*) {
      for (uint64_t r = drawn + first; r < drawn + first + n; ++r)
        std::memcpy(out.data() + r * rb, out.data() + pool_row(seed, r, drawn) * rb, rb);
    });
    return {};
  };
}

gguf_writer::producer convert_producer(const gguf_tensor& src, ggml_type type, unsigned threads) {
  const gguf_tensor* t = &src;
  return [t, type, threads](std::span<uint8_t> out) -> status {
    const uint64_t row_len = t->dims[0];
    const uint64_t n_rows = row_len ? t->n_elements / row_len : 0;
    uint64_t out_rb = 0;
    TANDEM_TRY(check_size(out, type, row_len, n_rows, out_rb));
    if (t->type == type) {
      std::memcpy(out.data(), t->data, out.size());
      return {};
    }
    auto in_rb = row_bytes(t->type, row_len);
    if (!in_rb) return make_error(t->name, ": bad row length for ", type_name(t->type));
    for_each_row_chunk(n_rows, threads, row_len, [&](uint64_t first, uint64_t n, float* row) {
      const int64_t len = static_cast<int64_t>(row_len);
      for (uint64_t r = first; r < first + n; ++r) {
        dequantize_row(t->type, t->data + r * *in_rb, row, len);
        quantize_row(type, row, out.data() + r * out_rb, len);
      }
    });
    return {};
  };
}

}  // namespace tandem
