// Writes GGUF v3. Layout: header, KVs, tensor infos, padding to the alignment, then each tensor's
// bytes padded to the alignment (llama.cpp's layout, which gguf_file checks). Tensors are produced
// one at a time into one reusable buffer; files go to a temporary name and are renamed at the end.
#include "gguf/gguf_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>

#include "gguf/gguf_cursor.h"
#include "gguf/gguf_internal.h"
#include "gguf/gguf_reader.h"

namespace tandem {

using namespace gguf_detail;

class gguf_writer::sink {
 public:
  virtual ~sink() = default;
  virtual status put(const void* p, size_t n) = 0;

  template <class T>
  status put_scalar(T x) {
    return put(&x, sizeof x);
  }
  status put_string(std::string_view s) {
    TANDEM_TRY(put_scalar<uint64_t>(s.size()));
    return put(s.data(), s.size());
  }
  status put_zeros(uint64_t n) {
    static const uint8_t zeros[256] = {};
    while (n > 0) {
      const size_t k = n < sizeof zeros ? static_cast<size_t>(n) : sizeof zeros;
      TANDEM_TRY(put(zeros, k));
      n -= k;
    }
    return {};
  }
  uint64_t written() const { return written_; }

 protected:
  uint64_t written_ = 0;
};

namespace {

using sink = gguf_writer::sink;

class memory_sink : public sink {
 public:
  status put(const void* p, size_t n) override {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
    written_ += n;
    return {};
  }
  std::vector<uint8_t> out;
};

// Buffered writes to a file descriptor; errors name the final path and the temporary one.
class fd_sink : public sink {
 public:
  fd_sink(int fd, const std::string& path, const std::string& tmp)
      : fd_(fd), path_(path), tmp_(tmp) {
    buf_.resize(1 << 20);
  }

  status put(const void* p, size_t n) override {
    written_ += n;
    if (n <= buf_.size() - used_) {
      std::memcpy(buf_.data() + used_, p, n);
      used_ += n;
      return {};
    }
    TANDEM_TRY(flush());
    if (n >= buf_.size()) return write_all(p, n);
    std::memcpy(buf_.data(), p, n);
    used_ = n;
    return {};
  }

  status flush() {
    if (used_ == 0) return {};
    status st = write_all(buf_.data(), used_);
    used_ = 0;
    return st;
  }

 private:
  status write_all(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    while (n > 0) {
      const ssize_t k = ::write(fd_, b, n);
      if (k < 0) {
        if (errno == EINTR) continue;
        return make_error("gguf writer: ", path_, ": write failed (temporary file ", tmp_,
                          "): ", std::strerror(errno));
      }
      b += k;
      n -= static_cast<size_t>(k);
    }
    return {};
  }

  int fd_;
  const std::string& path_;
  const std::string& tmp_;
  std::vector<uint8_t> buf_;
  size_t used_ = 0;
};

bool is_pow2(uint32_t a) { return a != 0 && (a & (a - 1)) == 0; }

// Every item of every (nested) array must have the array's element type.
status check_value(const std::string& key, const gguf_value& v, const std::string& where,
                   uint32_t depth) {
  const auto* a = std::get_if<gguf_array>(&v.v);
  if (!a) return {};
  // Deeper nesting than the reader accepts by default would write a file we cannot read back.
  if (depth >= gguf_limits{}.max_array_depth) {
    return make_error("gguf writer: key '", printable(key), "'", where,
                      ": arrays nest deeper than ", gguf_limits{}.max_array_depth);
  }
  if (static_cast<uint32_t>(a->elem_type) >= k_type_count) {
    return make_error("gguf writer: key '", printable(key), "'", where,
                      ": unknown array element type ", static_cast<uint32_t>(a->elem_type));
  }
  for (size_t i = 0; i < a->items.size(); ++i) {
    const gguf_value& item = a->items[i];
    const std::string w = where + "[" + std::to_string(i) + "]";
    if (item.type() != a->elem_type) {
      return make_error("gguf writer: key '", printable(key), "'", w, " is ",
                        gguf_type_name(item.type()), " in an array of ",
                        gguf_type_name(a->elem_type));
    }
    TANDEM_TRY(check_value(key, item, w, depth + 1));
  }
  return {};
}

status put_value(sink& s, const gguf_value& v) {
  return std::visit(
      [&](const auto& x) -> status {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) {
          return s.put_scalar<uint8_t>(x ? 1 : 0);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return s.put_string(x);
        } else if constexpr (std::is_same_v<T, gguf_array>) {
          TANDEM_TRY(s.put_scalar<uint32_t>(static_cast<uint32_t>(x.elem_type)));
          TANDEM_TRY(s.put_scalar<uint64_t>(x.items.size()));
          for (const gguf_value& item : x.items) TANDEM_TRY(put_value(s, item));
          return {};
        } else {
          return s.put_scalar<T>(x);
        }
      },
      v.v);
}

}  // namespace

gguf_writer::gguf_writer(uint32_t alignment) : alignment_(alignment) {}

void gguf_writer::set(const std::string& key, gguf_value value) {
  for (gguf_kv& kv : kv_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kv_.push_back(gguf_kv{key, std::move(value)});
}

status gguf_writer::add_tensor(const std::string& name, ggml_type type, std::vector<uint64_t> dims,
                               producer fill) {
  const std::string tf = "gguf writer: tensor '" + printable(name) + "'";
  if (name.empty()) return make_error("gguf writer: empty tensor name");
  if (!valid_utf8(name)) return make_error(tf, ": name is not valid UTF-8");
  for (const tensor_entry& t : tensors_) {
    if (t.name == name) return make_error(tf, ": duplicate tensor name");
  }
  if (dims.empty() || dims.size() > k_max_dims) {
    return make_error(tf, ": ", dims.size(), " dimensions (expected 1 to ", k_max_dims, ")");
  }
  const ggml_type_info* info = find_type_info(static_cast<uint32_t>(type));
  if (!info) return make_error(tf, ": unknown ggml type id ", static_cast<uint32_t>(type));
  constexpr uint64_t k_max_el = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t n_el = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0) return make_error(tf, ": dims[", d, "] is 0");
    if (dims[d] > k_max_el / n_el) return make_error(tf, ": element count overflows");
    n_el *= dims[d];
  }
  const std::optional<uint64_t> rb = row_bytes(type, dims[0]);
  if (!rb && dims[0] % info->block_size == 0) return make_error(tf, ": byte size overflows");
  if (!rb) {
    return make_error(tf, ": row length dims[0] = ", dims[0], " is not a multiple of the ",
                      info->name, " block size ", info->block_size);
  }
  const uint64_t rows = n_el / dims[0];
  if (*rb > std::numeric_limits<uint64_t>::max() / rows)
    return make_error(tf, ": byte size overflows");
  if (!fill) return make_error(tf, ": no producer");
  tensors_.push_back(tensor_entry{name, type, std::move(dims), *rb * rows, std::move(fill)});
  return {};
}

status gguf_writer::add_tensor(const std::string& name, ggml_type type, std::vector<uint64_t> dims,
                               std::vector<uint8_t> bytes) {
  auto data = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  producer fill = [data](std::span<uint8_t> out) -> status {
    std::memcpy(out.data(), data->data(), out.size());  // sizes checked below
    return {};
  };
  TANDEM_TRY(add_tensor(name, type, std::move(dims), std::move(fill)));
  if (tensors_.back().n_bytes != data->size()) {
    const tensor_entry t = std::move(tensors_.back());
    tensors_.pop_back();
    return make_error("gguf writer: tensor '", printable(name), "': ", data->size(),
                      " bytes given, ", type_name(type), " needs ", t.n_bytes);
  }
  return {};
}

uint64_t gguf_writer::tensor_data_bytes() const {
  uint64_t total = 0;
  for (const tensor_entry& t : tensors_) total += t.n_bytes;
  return total;
}

namespace {

status validate(uint32_t alignment, const std::vector<gguf_kv>& kv, bool& add_alignment) {
  if (!is_pow2(alignment))
    return make_error("gguf writer: alignment ", alignment, " is not a nonzero power of two");
  if (alignment > k_max_alignment)
    return make_error("gguf writer: alignment ", alignment, " is larger than the limit ", k_max_alignment);
  add_alignment = alignment != k_default_alignment;
  for (const gguf_kv& e : kv) {
    if (e.key.empty()) return make_error("gguf writer: empty key");
    if (!valid_utf8(e.key))
      return make_error("gguf writer: key '", printable(e.key), "' is not valid UTF-8");
    if (static_cast<uint32_t>(e.value.type()) >= k_type_count) {
      return make_error("gguf writer: key '", printable(e.key), "': unknown value type");
    }
    TANDEM_TRY(check_value(e.key, e.value, "", 0));
    if (e.key == k_alignment_key) {
      const auto* a = std::get_if<uint32_t>(&e.value.v);
      if (!a || *a != alignment) {
        std::string value = describe_type(e.value);
        if (a) value += ' ' + std::to_string(*a);
        return make_error("gguf writer: key '", k_alignment_key, "' is set to ", value,
                          " but the writer aligns to ", alignment,
                          " (pass the alignment to the constructor instead)");
      }
      add_alignment = false;
    }
  }
  return {};
}

}  // namespace

// Serializes everything into s. Shared by write() and write_to_memory(); `where` prefixes errors.
status gguf_writer::write_to(sink& s, const progress_fn& progress, const std::string& where) const {
  bool add_alignment = false;
  TANDEM_TRY(validate(alignment_, kv_, add_alignment));

  TANDEM_TRY(s.put("GGUF", 4));
  TANDEM_TRY(s.put_scalar<uint32_t>(k_version));
  TANDEM_TRY(s.put_scalar<uint64_t>(tensors_.size()));
  TANDEM_TRY(s.put_scalar<uint64_t>(kv_.size() + (add_alignment ? 1 : 0)));
  for (const gguf_kv& e : kv_) {
    TANDEM_TRY(s.put_string(e.key));
    TANDEM_TRY(s.put_scalar<uint32_t>(static_cast<uint32_t>(e.value.type())));
    TANDEM_TRY(put_value(s, e.value));
  }
  if (add_alignment) {
    TANDEM_TRY(s.put_string(k_alignment_key));
    TANDEM_TRY(s.put_scalar<uint32_t>(static_cast<uint32_t>(gguf_type::u32)));
    TANDEM_TRY(s.put_scalar<uint32_t>(alignment_));
  }

  uint64_t offset = 0;
  uint64_t total = 0;
  for (const tensor_entry& t : tensors_) {
    TANDEM_TRY(s.put_string(t.name));
    TANDEM_TRY(s.put_scalar<uint32_t>(static_cast<uint32_t>(t.dims.size())));
    for (uint64_t d : t.dims) TANDEM_TRY(s.put_scalar<uint64_t>(d));
    TANDEM_TRY(s.put_scalar<uint32_t>(static_cast<uint32_t>(t.type)));
    TANDEM_TRY(s.put_scalar<uint64_t>(offset));
    if (offset > std::numeric_limits<uint64_t>::max() - t.n_bytes ||
        !gguf_align_up(offset + t.n_bytes, alignment_, offset)) {
      return make_error("gguf writer: ", where, "tensor data size overflows");
    }
    total += t.n_bytes;
  }
  uint64_t data_start = 0;
  gguf_align_up(s.written(), alignment_, data_start);
  TANDEM_TRY(s.put_zeros(data_start - s.written()));

  std::vector<uint8_t> buf;  // reused across tensors
  uint64_t done = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const tensor_entry& t = tensors_[i];
    if (t.n_bytes > std::numeric_limits<size_t>::max()) {
      return make_error("gguf writer: ", where, "tensor '", printable(t.name),
                        "' is too large for memory");
    }
    buf.assign(static_cast<size_t>(t.n_bytes), 0);
    status st = t.fill(std::span<uint8_t>(buf.data(), buf.size()));
    if (!st.ok())
      return make_error("gguf writer: ", where, "tensor '", printable(t.name), "': ", st.message());
    TANDEM_TRY(s.put(buf.data(), buf.size()));
    uint64_t end = 0;
    gguf_align_up(s.written(), alignment_, end);
    TANDEM_TRY(s.put_zeros(end - s.written()));
    done += t.n_bytes;
    if (progress) progress(i + 1, tensors_.size(), done, total);
  }
  return {};
}

result<std::vector<uint8_t>> gguf_writer::write_to_memory() const {
  memory_sink s;
  TANDEM_TRY(write_to(s, {}, ""));
  return std::move(s.out);
}

status gguf_writer::write(const std::string& path, const progress_fn& progress) const {
  bool add_alignment = false;
  TANDEM_TRY(validate(alignment_, kv_, add_alignment));  // before touching the disk

  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    return make_error("gguf writer: ", path, ": cannot create temporary file ", tmp, ": ",
                      std::strerror(errno));
  }
  // Until the rename succeeds, any failure removes the temporary file.
  struct cleanup {
    int fd;
    const std::string& tmp;
    bool armed = true;
    ~cleanup() {
      if (fd >= 0) ::close(fd);
      if (armed) ::unlink(tmp.c_str());
    }
  } guard{fd, tmp};

  fd_sink s(fd, path, tmp);
  TANDEM_TRY(write_to(s, progress, path + ": "));
  TANDEM_TRY(s.flush());
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    return make_error("gguf writer: ", path, ": fsync failed (temporary file ", tmp,
                      "): ", std::strerror(errno));
  }
  guard.fd = -1;
  if (::close(fd) != 0) {
    return make_error("gguf writer: ", path, ": close failed (temporary file ", tmp,
                      "): ", std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return make_error("gguf writer: ", path, ": cannot rename ", tmp,
                      " to it: ", std::strerror(errno));
  }
  guard.armed = false;
  return {};
}

}  // namespace tandem
