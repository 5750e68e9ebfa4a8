// Reads Hugging Face *.safetensors files through mmap: a u64 little-endian header length, a JSON
// header (dtype, shape, data_offsets per tensor, optional __metadata__), then the tensor bytes.
// Every offset is checked against the file; a bad file is an error naming the file and tensor.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace tandem {

enum class st_dtype { f64, f32, f16, bf16, i64, i32, i16, i8, u8, boolean, f8_e4m3, f8_e5m2 };

std::string_view st_dtype_name(st_dtype t);  // as the header spells it: "F32", "BF16", ...
uint32_t st_dtype_size(st_dtype t);          // bytes per element

struct st_tensor {
  std::string name;
  st_dtype dtype = st_dtype::f32;
  std::vector<uint64_t> shape;  // PyTorch order: shape.back() is contiguous
  uint64_t n_elements = 0;
  std::span<const uint8_t> data;      // into the mapping (or the caller's buffer for parse())
  const std::string* file = nullptr;  // the file it came from, for error messages
};

struct st_limits {
  uint64_t max_header_bytes = 100ull << 20;  // the reference implementation's cap
  uint32_t max_dims = 8;
};

class safetensors_file {
 public:
  // Maps the file read-only.
  static result<safetensors_file> open(const std::string& path, const st_limits& limits = {});
  // Parses bytes the caller keeps alive; `label` names them in errors.
  static result<safetensors_file> parse(std::span<const uint8_t> bytes, std::string label,
                                        const st_limits& limits = {});

  safetensors_file(safetensors_file&&) noexcept;
  safetensors_file& operator=(safetensors_file&&) noexcept;
  ~safetensors_file();

  const std::string& path() const { return *path_; }
  const std::vector<st_tensor>& tensors() const { return tensors_; }  // in data-offset order
  const st_tensor* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  safetensors_file() = default;
  struct mapping;
  status parse_header(std::span<const uint8_t> bytes, const st_limits& limits);

  std::unique_ptr<mapping> map_;
  std::unique_ptr<std::string> path_;  // stable address: tensors point at it
  std::vector<st_tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All weights of a model directory: the files named by model.safetensors.index.json when present,
// else every *.safetensors file in it. A tensor name may appear only once across the files.
class safetensors_model {
 public:
  static result<safetensors_model> open_dir(const std::string& dir, const st_limits& limits = {});

  const st_tensor* find(std::string_view name) const;
  std::vector<const st_tensor*> tensors() const;  // sorted by name
  const std::vector<safetensors_file>& files() const { return files_; }

 private:
  status add_file(safetensors_file file);

  std::vector<safetensors_file> files_;
  std::map<std::string, const st_tensor*, std::less<>> by_name_;
};

// Converts elements [first, first + count) of a floating-point tensor (F64/F32/F16/BF16) to float.
// Errors: a non-float dtype or a range past the tensor's end.
status read_floats(const st_tensor& t, uint64_t first, uint64_t count, float* out);

}  // namespace tandem
