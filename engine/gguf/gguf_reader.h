// Reads a GGUF v2/v3 file through mmap. Every count, length, offset and size is checked against
// the file size with overflow-safe arithmetic; a bad file is an error naming the field and offset.
// Tensor data is not copied: tensor views point into the mapping, which lives as long as the file.
//
// What is refused (each error names the field and its byte offset): bad magic, versions other
// than 2 and 3 (v1 has 32-bit counts), counts, lengths and array sizes past the limits below or
// past what the bytes remaining could hold (checked before anything is allocated), unknown value
// types, arrays nested deeper than max_array_depth, bool bytes other than 0 and 1, empty or
// non-UTF-8 keys and tensor names, duplicate keys and tensor names, general.alignment that is not
// a u32 nonzero power of two, n_dims outside 1..4 (0-d tensors too), zero dims, element counts
// past 2^63 or byte sizes past 2^64, unknown ggml type ids, rows (dims[0]) not a multiple of the
// type's block size, offsets not a multiple of the alignment, and tensor data that overlaps,
// leaves gaps or runs past the end of the file: sorted by offset, tensors must be packed from
// offset 0 with only alignment padding between them (llama.cpp's layout). Accepted: a last tensor
// without its trailing padding, and bytes after the last tensor (ignored). String values are not
// checked for UTF-8 (vocabularies hold arbitrary bytes).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/file_source.h"
#include "core/result.h"
#include "gguf/gguf_value.h"
#include "quant/ggml_type.h"

namespace tandem {

struct gguf_tensor {
  std::string name;
  ggml_type type = ggml_type::f32;
  uint32_t n_dims = 0;
  uint64_t dims[4] = {1, 1, 1, 1};  // dims[0] is contiguous (the input dimension of a matrix)
  uint64_t offset = 0;              // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping (or the caller's buffer for parse())
};

struct gguf_limits {
  uint64_t max_string_bytes = 64ull << 20;
  uint64_t max_array_items = 1ull << 28;
  uint32_t max_array_depth = 4;
  uint64_t max_tensors = 1ull << 20;
  uint64_t max_kv = 1ull << 20;
  // Array items of all metadata values together (each item becomes a gguf_value in memory).
  uint64_t max_total_array_items = 1ull << 28;
};

class gguf_file {
 public:
  // Maps the file read-only. Errors name the path and the offending field.
  static result<gguf_file> open(const std::string& path, const gguf_limits& limits = {});
  // Parses bytes the caller keeps alive (tests, the fuzzer). No copy of tensor data.
  static result<gguf_file> parse(std::span<const uint8_t> bytes, const gguf_limits& limits = {});

  gguf_file(gguf_file&&) noexcept;
  gguf_file& operator=(gguf_file&&) noexcept;
  ~gguf_file();

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute start of the data section
  uint64_t file_size() const { return size_; }
  // An opened file: an error when it has since been truncated, extended or written in place
  // (reading its mapped pages could then fault or give other bytes). A file replaced by a rename
  // is not a change: the mapping keeps the old one. Parsed bytes: always fine.
  status check_unchanged() const;
  // The descriptor and mapping to read tensor bytes with pread(); fd -1 for parsed bytes.
  file_source source() const;

  const std::vector<gguf_kv>& metadata() const { return kv_; }
  const gguf_value* find(std::string_view key) const;

  // Typed access: an error names the key and both types when they differ, or says it is missing.
  // get_uint/get_int accept any integer wire type whose value fits; get_float accepts f32/f64.
  result<uint64_t> get_uint(std::string_view key) const;
  result<int64_t> get_int(std::string_view key) const;
  result<double> get_float(std::string_view key) const;
  result<bool> get_bool(std::string_view key) const;
  result<std::string> get_string(std::string_view key) const;
  result<std::vector<std::string>> get_string_array(std::string_view key) const;
  result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  result<std::vector<double>> get_float_array(std::string_view key) const;

  const std::vector<gguf_tensor>& tensors() const { return tensors_; }
  const gguf_tensor* find_tensor(std::string_view name) const;

 private:
  gguf_file() = default;
  struct mapping;
  friend class gguf_parser;
  static result<gguf_file> parse_impl(std::span<const uint8_t> bytes, const gguf_limits& limits,
                                      std::unique_ptr<mapping> map, const std::string& where);
  static status parse_into(std::span<const uint8_t> bytes, const gguf_limits& limits, gguf_file& f);

  std::unique_ptr<mapping> map_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<gguf_kv> kv_;
  std::vector<gguf_tensor> tensors_;
  std::map<std::string, size_t, std::less<>> kv_index_;      // key -> index in kv_
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> index in tensors_
};

}  // namespace tandem
