// Writes GGUF v3: metadata of every type, tensor infos, then aligned tensor data. Tensor bytes are
// produced on demand while writing, so a large model streams to disk without living in RAM.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "gguf/gguf_value.h"
#include "quant/ggml_type.h"

namespace tandem {

class gguf_writer {
 public:
  // Fills exactly the tensor's byte count (row_bytes(type, dims[0]) * rows).
  using producer = std::function<status(std::span<uint8_t> out)>;
  // Called after each tensor is written: (tensors done, total, bytes done, total bytes).
  using progress_fn = std::function<void(size_t, size_t, uint64_t, uint64_t)>;

  explicit gguf_writer(uint32_t alignment = 32);

  // Replaces an earlier value of the same key, keeping its position.
  void set(const std::string& key, gguf_value value);
  void set_u32(const std::string& key, uint32_t v) { set(key, gguf_value{v}); }
  void set_f32(const std::string& key, float v) { set(key, gguf_value{v}); }
  void set_bool(const std::string& key, bool v) { set(key, gguf_value{v}); }
  void set_string(const std::string& key, std::string v) { set(key, gguf_value{std::move(v)}); }

  // dims[0] is contiguous. Errors: duplicate name, bad dims, row not a multiple of the block.
  status add_tensor(const std::string& name, ggml_type type, std::vector<uint64_t> dims,
                    producer fill);
  status add_tensor(const std::string& name, ggml_type type, std::vector<uint64_t> dims,
                    std::vector<uint8_t> bytes);

  uint64_t tensor_data_bytes() const;  // sum of tensor bytes, padding excluded

  status write(const std::string& path, const progress_fn& progress = {}) const;
  result<std::vector<uint8_t>> write_to_memory() const;

  class sink;  // where serialized bytes go (a file or memory); defined in gguf_writer.cpp

 private:
  status write_to(sink& s, const progress_fn& progress, const std::string& where) const;

  struct tensor_entry {
    std::string name;
    ggml_type type;
    std::vector<uint64_t> dims;
    uint64_t n_bytes;
    producer fill;
  };
  uint32_t alignment_;
  std::vector<gguf_kv> kv_;
  std::vector<tensor_entry> tensors_;
};

}  // namespace tandem
