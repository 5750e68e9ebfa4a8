// Parses and validates GGUF v2/v3 bytes. Every read goes through a bounded cursor; every count is
// checked against the bytes remaining before anything is allocated for it, and every error names
// the field and its byte offset. Messages here have no "gguf: " prefix: gguf_file adds it.
#include <algorithm>
#include <cstdio>
#include <limits>

#include "gguf/gguf_cursor.h"
#include "gguf/gguf_internal.h"
#include "gguf/gguf_reader.h"

namespace tandem {

using namespace gguf_detail;

class gguf_parser {
 public:
  gguf_parser(std::span<const uint8_t> bytes, const gguf_limits& limits, gguf_file& f)
      : cur_(bytes), bytes_(bytes), limits_(limits), f_(f) {}

  status run() {
    TANDEM_TRY(read_header());
    TANDEM_TRY(read_metadata());
    TANDEM_TRY(read_alignment());
    TANDEM_TRY(read_tensor_infos());
    return check_layout();
  }

 private:
  template <class... Parts>
  static error fail(std::string_view field, uint64_t off, const Parts&... detail) {
    return make_error(field, " at offset ", off, ": ", detail...);
  }
  error truncated(std::string_view field, uint64_t off, uint64_t need) const {
    return fail(field, off, "truncated (needs ", need, " bytes, ",
                cur_.size() - std::min<uint64_t>(off, cur_.size()), " remain)");
  }

  template <class T>
  status read_scalar(std::string_view field, T& out) {
    const uint64_t off = cur_.pos();
    if (!cur_.read(out)) return truncated(field, off, sizeof(T));
    return {};
  }

  // Reads a u64-length string, capped by max_string_bytes and the bytes remaining. field() names
  // it in errors (only called on error, so array items do not format a name each).
  template <class FieldFn>
  status read_string(const FieldFn& field, std::string& out) {
    const uint64_t off = cur_.pos();
    uint64_t len = 0;
    if (!cur_.read(len)) return truncated(std::string(field()) + " length", off, 8);
    if (len > limits_.max_string_bytes) {
      return fail(std::string(field()) + " length", off, len, " bytes exceeds the limit of ",
                  limits_.max_string_bytes);
    }
    std::string_view sv;
    if (!cur_.read_bytes(len, sv)) {
      return fail(field(), off + 8, "truncated (length ", len, " but only ", cur_.remaining(),
                  " bytes remain)");
    }
    out.assign(sv);
    return {};
  }

  status read_header() {
    std::string_view magic;
    if (!cur_.read_bytes(4, magic)) return truncated("magic", 0, 4);
    if (magic != "GGUF") {
      // The bytes found are not echoed: a daemon's load error must not read out a file that is
      // not a model (a client can name any path the daemon can read). Only llama.cpp's own older
      // formats are named, since they are worth converting.
      const bool legacy = magic == "GGML" || magic == "lmgg" || magic == "GGJT" || magic == "tjgg" ||
                          magic == "GGMF" || magic == "fmgg" || magic == "GGLA" || magic == "algg";
      return fail("magic", 0, "expected \"GGUF\" (not a GGUF file",
                  legacy ? ": an older GGML-family file; convert it to GGUF)" : ")");
    }
    uint32_t version = 0;
    TANDEM_TRY(read_scalar("version", version));
    if (version == 1) {
      return fail("version", 4,
                  "GGUF v1 is not supported (32-bit counts); only v2 and v3 are read, "
                  "re-convert the model with a current llama.cpp");
    }
    if (version != 2 && version != 3) {
      if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3) {
        return fail("version", 4, version,
                    " looks byte-swapped: big-endian GGUF files are not supported");
      }
      return fail("version", 4, "unsupported version ", version, " (expected 2 or 3)");
    }
    f_.version_ = version;

    TANDEM_TRY(read_scalar("tensor_count", n_tensors_));
    TANDEM_TRY(read_scalar("kv_count", n_kv_));
    // Each KV takes at least a key length, a type and one byte; each tensor info at least a name
    // length, n_dims, one dim, a type and an offset.
    constexpr uint64_t k_min_kv = 8 + 4 + 1;
    constexpr uint64_t k_min_tensor = 8 + 4 + 8 + 4 + 8;
    if (n_tensors_ > limits_.max_tensors) {
      return fail("tensor_count", 8, n_tensors_, " exceeds the limit of ", limits_.max_tensors);
    }
    if (n_kv_ > limits_.max_kv)
      return fail("kv_count", 16, n_kv_, " exceeds the limit of ", limits_.max_kv);
    if (n_kv_ > cur_.remaining() / k_min_kv) {
      return fail("kv_count", 16, n_kv_, " entries need at least ", k_min_kv,
                  " bytes each but only ", cur_.remaining(),
                  " bytes remain (truncated or corrupt)");
    }
    if (n_tensors_ > cur_.remaining() / k_min_tensor) {
      return fail("tensor_count", 8, n_tensors_, " tensor infos need at least ", k_min_tensor,
                  " bytes each but only ", cur_.remaining(),
                  " bytes remain (truncated or corrupt)");
    }
    return {};
  }

  status read_metadata() {
    f_.kv_.reserve(n_kv_);
    value_offsets_.reserve(n_kv_);
    for (uint64_t i = 0; i < n_kv_; ++i) {
      const uint64_t key_off = cur_.pos();
      gguf_kv kv;
      const std::string field = "kv[" + std::to_string(i) + "] key";
      TANDEM_TRY(read_string([&] { return field; }, kv.key));
      if (kv.key.empty()) return fail(field, key_off, "empty key");
      if (!valid_utf8(kv.key))
        return fail(field, key_off, "key '", printable(kv.key), "' is not valid UTF-8");
      if (auto it = f_.kv_index_.find(kv.key); it != f_.kv_index_.end()) {
        return fail(field, key_off, "duplicate key '", printable(kv.key), "' (first at kv[",
                    it->second, "])");
      }
      key_ = "key '" + printable(kv.key) + "'";
      const uint64_t type_off = cur_.pos();
      uint32_t type_id = 0;
      TANDEM_TRY(read_scalar(key_ + " type", type_id));
      if (type_id >= k_type_count)
        return fail(key_ + " type", type_off, "unknown value type ", type_id);
      value_offsets_.push_back(cur_.pos());
      path_.clear();
      TANDEM_TRY(read_value(static_cast<gguf_type>(type_id), 0, kv.value));
      f_.kv_index_.emplace(kv.key, f_.kv_.size());
      f_.kv_.push_back(std::move(kv));
    }
    return {};
  }

  // "key 'x'" plus the array indices being read: "key 'x'[3][0]".
  std::string value_field() const {
    std::string s = key_;
    for (uint64_t i : path_) {
      s += '[';
      s += std::to_string(i);
      s += ']';
    }
    return s;
  }

  template <class T>
  status read_plain(gguf_value& out) {
    T x{};
    const uint64_t off = cur_.pos();
    if (!cur_.read(x)) return truncated(value_field(), off, sizeof(T));
    out.v.emplace<T>(x);
    return {};
  }

  // depth = number of arrays enclosing this value.
  status read_value(gguf_type t, uint32_t depth, gguf_value& out) {
    switch (t) {
      case gguf_type::u8:
        return read_plain<uint8_t>(out);
      case gguf_type::i8:
        return read_plain<int8_t>(out);
      case gguf_type::u16:
        return read_plain<uint16_t>(out);
      case gguf_type::i16:
        return read_plain<int16_t>(out);
      case gguf_type::u32:
        return read_plain<uint32_t>(out);
      case gguf_type::i32:
        return read_plain<int32_t>(out);
      case gguf_type::f32:
        return read_plain<float>(out);
      case gguf_type::u64:
        return read_plain<uint64_t>(out);
      case gguf_type::i64:
        return read_plain<int64_t>(out);
      case gguf_type::f64:
        return read_plain<double>(out);
      case gguf_type::boolean: {
        const uint64_t off = cur_.pos();
        uint8_t b = 0;
        if (!cur_.read(b)) return truncated(value_field(), off, 1);
        // Policy: a bool is exactly 0 or 1; any other byte is corruption, not "true".
        if (b > 1)
          return fail(value_field(), off, "bool byte is ", unsigned{b}, ", expected 0 or 1");
        out.v.emplace<bool>(b == 1);
        return {};
      }
      case gguf_type::string: {
        std::string s;
        TANDEM_TRY(read_string([this] { return value_field(); }, s));
        out.v.emplace<std::string>(std::move(s));
        return {};
      }
      case gguf_type::array:
        return read_array(depth, out);
    }
    return fail(value_field(), cur_.pos(), "unknown value type");  // not reached: ids checked
  }

  status read_array(uint32_t depth, gguf_value& out) {
    const uint32_t level = depth + 1;  // this array's nesting level, 1 for a top-level array
    const uint64_t type_off = cur_.pos();
    if (level > limits_.max_array_depth) {
      return fail(value_field(), type_off, "array nesting deeper than the limit of ",
                  limits_.max_array_depth);
    }
    uint32_t type_id = 0;
    if (!cur_.read(type_id)) return truncated(value_field() + " element type", type_off, 4);
    if (type_id >= k_type_count) {
      return fail(value_field() + " element type", type_off, "unknown value type ", type_id);
    }
    const auto et = static_cast<gguf_type>(type_id);
    if (et == gguf_type::array && level + 1 > limits_.max_array_depth) {
      return fail(value_field() + " element type", type_off,
                  "array nesting deeper than the limit of ", limits_.max_array_depth);
    }
    const uint64_t count_off = cur_.pos();
    uint64_t count = 0;
    if (!cur_.read(count)) return truncated(value_field() + " count", count_off, 8);
    if (count > limits_.max_array_items) {
      return fail(value_field() + " count", count_off, count, " items exceeds the limit of ",
                  limits_.max_array_items);
    }
    const uint64_t min_size = min_wire_size(et);
    if (count > cur_.remaining() / min_size) {
      return fail(value_field() + " count", count_off, count, " items of ", gguf_type_name(et),
                  " need at least ", min_size, " bytes each but only ", cur_.remaining(),
                  " bytes remain (truncated or corrupt)");
    }
    if (count > limits_.max_total_array_items - total_items_) {
      return fail(value_field() + " count", count_off, count,
                  " items bring the metadata past the limit of ", limits_.max_total_array_items,
                  " array items in all");
    }
    total_items_ += count;
    gguf_array a;
    a.elem_type = et;
    a.items.reserve(count);  // bounded: count * min_size <= bytes remaining
    path_.push_back(0);
    for (uint64_t i = 0; i < count; ++i) {
      path_.back() = i;
      a.items.emplace_back();
      TANDEM_TRY(read_value(et, level, a.items.back()));
    }
    path_.pop_back();
    out.v.emplace<gguf_array>(std::move(a));
    return {};
  }

  status read_alignment() {
    auto it = f_.kv_index_.find(k_alignment_key);
    if (it == f_.kv_index_.end()) {
      f_.alignment_ = k_default_alignment;
      return {};
    }
    const gguf_value& v = f_.kv_[it->second].value;
    const uint64_t off = value_offsets_[it->second];
    const std::string field = "key '" + std::string(k_alignment_key) + "'";
    const auto* a = std::get_if<uint32_t>(&v.v);
    if (!a) return fail(field, off, "is ", describe_type(v), ", expected a u32 power of two");
    if (*a == 0 || (*a & (*a - 1)) != 0) {
      return fail(field, off, *a, " is not a nonzero power of two");
    }
    if (*a > k_max_alignment) return fail(field, off, *a, " is larger than the limit ", k_max_alignment);
    f_.alignment_ = *a;
    return {};
  }

  status read_tensor_infos() {
    f_.tensors_.reserve(n_tensors_);
    offset_fields_.reserve(n_tensors_);
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      gguf_tensor t;
      const std::string field = "tensor[" + std::to_string(i) + "] name";
      const uint64_t name_off = cur_.pos();
      TANDEM_TRY(read_string([&] { return field; }, t.name));
      if (t.name.empty()) return fail(field, name_off, "empty tensor name");
      if (!valid_utf8(t.name)) {
        return fail(field, name_off, "tensor name '", printable(t.name), "' is not valid UTF-8");
      }
      if (auto it = f_.tensor_index_.find(t.name); it != f_.tensor_index_.end()) {
        return fail(field, name_off, "duplicate tensor name '", printable(t.name),
                    "' (first at tensor[", it->second, "])");
      }
      const std::string tf = "tensor '" + printable(t.name) + "'";

      const uint64_t ndims_off = cur_.pos();
      TANDEM_TRY(read_scalar(tf + " n_dims", t.n_dims));
      // Policy: 0-dimensional (scalar) tensors are refused; llama.cpp writers never emit them.
      if (t.n_dims == 0 || t.n_dims > k_max_dims) {
        return fail(tf + " n_dims", ndims_off, t.n_dims, " is out of range (1 to ", k_max_dims,
                    ")");
      }
      uint64_t n_el = 1;
      uint64_t dim0_off = 0;
      for (uint32_t d = 0; d < t.n_dims; ++d) {
        const std::string df = tf + " dims[" + std::to_string(d) + "]";
        const uint64_t off = cur_.pos();
        if (d == 0) dim0_off = off;
        TANDEM_TRY(read_scalar(df, t.dims[d]));
        constexpr uint64_t k_max_el = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
        if (t.dims[d] == 0) return fail(df, off, "dimension is 0 (empty tensors are not allowed)");
        if (t.dims[d] > k_max_el / n_el) {
          return fail(df, off, t.dims[d], " makes the element count overflow 63 bits");
        }
        n_el *= t.dims[d];
      }
      t.n_elements = n_el;

      const uint64_t type_off = cur_.pos();
      uint32_t type_id = 0;
      TANDEM_TRY(read_scalar(tf + " type", type_id));
      const ggml_type_info* info = find_type_info(type_id);
      if (!info) return fail(tf + " type", type_off, "unknown ggml type id ", type_id);
      t.type = info->type;
      const std::optional<uint64_t> rb = row_bytes(t.type, t.dims[0]);
      if (!rb && t.dims[0] % info->block_size == 0) {
        return fail(tf + " dims[0]", dim0_off, "row of ", t.dims[0], " ", info->name,
                    " elements overflows 64 bits");
      }
      if (!rb) {
        return fail(tf + " dims[0]", dim0_off, "row length ", t.dims[0],
                    " is not a multiple of the ", info->name, " block size ", info->block_size);
      }
      const uint64_t rows = n_el / t.dims[0];
      if (rows != 0 && *rb > std::numeric_limits<uint64_t>::max() / rows) {
        return fail(tf + " dims", dim0_off, "byte size overflows 64 bits");
      }
      t.n_bytes = *rb * rows;

      const uint64_t offset_off = cur_.pos();
      TANDEM_TRY(read_scalar(tf + " offset", t.offset));
      if (t.offset % f_.alignment_ != 0) {
        return fail(tf + " offset", offset_off, t.offset, " is not a multiple of the alignment ",
                    f_.alignment_);
      }
      offset_fields_.push_back(offset_off);
      f_.tensor_index_.emplace(t.name, f_.tensors_.size());
      f_.tensors_.push_back(std::move(t));
    }
    return {};
  }

  // Tensors sorted by offset must be packed from offset 0 with only alignment padding between
  // them (llama.cpp's layout), and all must lie inside the file.
  status check_layout() {
    uint64_t data_offset = 0;
    if (!gguf_align_up(cur_.pos(), f_.alignment_, data_offset)) {
      return fail("data section", cur_.pos(), "offset overflows");
    }
    f_.data_offset_ = data_offset;
    if (f_.tensors_.empty()) return {};
    if (data_offset > cur_.size()) {
      return fail("data section", data_offset, "starts past the end of the file (", cur_.size(),
                  " bytes): truncated");
    }
    const uint64_t data_size = cur_.size() - data_offset;

    std::vector<size_t> order(f_.tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return f_.tensors_[a].offset < f_.tensors_[b].offset;
    });

    uint64_t expected = 0;
    const gguf_tensor* prev = nullptr;
    for (size_t idx : order) {
      gguf_tensor& t = f_.tensors_[idx];
      const std::string field = "tensor '" + printable(t.name) + "' offset";
      const uint64_t off = offset_fields_[idx];
      if (t.offset < expected) {
        return fail(field, off, t.offset, " overlaps tensor '", printable(prev->name), "' [",
                    prev->offset, ", ", prev->offset + prev->n_bytes, ")");
      }
      if (t.offset > expected) {
        if (!prev)
          return fail(field, off, t.offset,
                      " leaves a gap at the start of the data section (expected 0)");
        return fail(field, off, t.offset, " leaves a gap after tensor '", printable(prev->name),
                    "' (expected ", expected, ")");
      }
      if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
        return fail(field, off, "data [", t.offset, ", +", t.n_bytes,
                    ") runs past the end of the file (data section at ", data_offset, " holds ",
                    data_size, " bytes): truncated");
      }
      t.data = bytes_.data() + data_offset + t.offset;
      const uint64_t end = t.offset + t.n_bytes;  // <= data_size, no overflow
      if (!gguf_align_up(end, f_.alignment_, expected))
        expected = std::numeric_limits<uint64_t>::max();
      prev = &t;
    }
    return {};
  }

  gguf_cursor cur_;
  std::span<const uint8_t> bytes_;
  const gguf_limits& limits_;
  gguf_file& f_;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t total_items_ = 0;
  std::vector<uint64_t> value_offsets_;  // per KV: where its value starts
  std::vector<uint64_t> offset_fields_;  // per tensor: where its offset field is
  std::string key_;                      // "key 'x'" of the KV being read
  std::vector<uint64_t> path_;           // array indices of the value being read
};

status gguf_file::parse_into(std::span<const uint8_t> bytes, const gguf_limits& limits,
                             gguf_file& f) {
  f.base_ = bytes.data();
  f.size_ = bytes.size();
  return gguf_parser(bytes, limits, f).run();
}

}  // namespace tandem
