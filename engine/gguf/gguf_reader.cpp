// gguf_file: opening (mmap) and typed metadata access. Parsing itself is in gguf_parser.cpp.
#include "gguf/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

#include "gguf/gguf_internal.h"

namespace tandem {

using namespace gguf_detail;

// The mapping, and the file kept open beside it so that a change of the same file (truncated,
// or written in place) can be seen before its pages are read (check_unchanged).
struct gguf_file::mapping {
  void* addr = nullptr;
  size_t len = 0;
  int fd = -1;
  std::string path;
  timespec mtime{};
  mapping(void* a, size_t n, int f, std::string p, timespec m) : addr(a), len(n), fd(f), path(std::move(p)), mtime(m) {}
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() {
    if (addr) ::munmap(addr, len);
    if (fd >= 0) ::close(fd);
  }
};

status gguf_file::check_unchanged() const {
  if (!map_ || map_->fd < 0) return {};
  struct stat st {};
  if (::fstat(map_->fd, &st) != 0)
    return make_error("gguf: ", map_->path, ": cannot stat the loaded file: ", std::strerror(errno));
  if (static_cast<uint64_t>(st.st_size) != map_->len)
    return make_error("gguf: ", map_->path, ": the file changed on disk since it was loaded (", map_->len, " bytes, now ",
                      st.st_size, "): reload the model");
  if (st.st_mtim.tv_sec != map_->mtime.tv_sec || st.st_mtim.tv_nsec != map_->mtime.tv_nsec)
    return make_error("gguf: ", map_->path, ": the file was written since it was loaded: reload the model");
  return {};
}

file_source gguf_file::source() const {
  if (!map_ || map_->fd < 0) return {};
  return {map_->fd, static_cast<const uint8_t*>(map_->addr), map_->len};
}

gguf_file::gguf_file(gguf_file&&) noexcept = default;
gguf_file& gguf_file::operator=(gguf_file&&) noexcept = default;
gguf_file::~gguf_file() = default;

result<gguf_file> gguf_file::parse_impl(std::span<const uint8_t> bytes, const gguf_limits& limits,
                                        std::unique_ptr<mapping> map, const std::string& where) {
  gguf_file f;
  f.map_ = std::move(map);
  if (status st = parse_into(bytes, limits, f); !st.ok())
    return make_error("gguf: ", where, st.message());
  return f;
}

result<gguf_file> gguf_file::parse(std::span<const uint8_t> bytes, const gguf_limits& limits) {
  return parse_impl(bytes, limits, nullptr, "");
}

result<gguf_file> gguf_file::open(const std::string& path, const gguf_limits& limits) {
  // O_NONBLOCK: a FIFO (or a device) named as a model must not block the open until a writer
  // comes; fstat below refuses anything but a regular file, where the flag changes nothing.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return make_error("gguf: ", path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error("gguf: ", path, ": cannot stat: ", std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return make_error("gguf: ", path, ": is a directory, not a GGUF file");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error("gguf: ", path, ": not a regular file");
  }
  if (st.st_size <= 0) {
    ::close(fd);
    return make_error("gguf: ", path, ": file is empty (truncated)");
  }
  if (static_cast<uint64_t>(st.st_size) > std::numeric_limits<size_t>::max()) {
    ::close(fd);
    return make_error("gguf: ", path, ": file is too large to map");
  }
  const auto len = static_cast<size_t>(st.st_size);
  void* addr = ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  if (addr == MAP_FAILED) {
    ::close(fd);
    return make_error("gguf: ", path, ": cannot mmap ", len, " bytes: ", std::strerror(map_errno));
  }
  auto map = std::make_unique<mapping>(addr, len, fd, path, st.st_mtim);
  std::span<const uint8_t> bytes(static_cast<const uint8_t*>(addr), len);
  return parse_impl(bytes, limits, std::move(map), path + ": ");
}

const gguf_value* gguf_file::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].value;
}

const gguf_tensor* gguf_file::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

error missing(std::string_view key) {
  return make_error("gguf: key '", printable(key), "' is missing");
}

error mismatch(std::string_view key, const gguf_value& v, std::string_view expected) {
  return make_error("gguf: key '", printable(key), "' is ", describe_type(v), ", expected ",
                    expected);
}

// Integer wire types as a sign and magnitude; false for other types.
bool integer_of(const gguf_value& v, bool& negative, uint64_t& magnitude) {
  return std::visit(
      [&](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_signed_v<T>) {
            negative = x < 0;
            magnitude = negative ? static_cast<uint64_t>(-(static_cast<int64_t>(x) + 1)) + 1
                                 : static_cast<uint64_t>(x);
          } else {
            negative = false;
            magnitude = x;
          }
          return true;
        } else {
          return false;
        }
      },
      v.v);
}

std::string int_text(bool negative, uint64_t magnitude) {
  // Built this way round: `"-" + to_string` trips a false -Wrestrict in GCC 12.
  std::string s = std::to_string(magnitude);
  if (negative) s.insert(s.begin(), '-');
  return s;
}

// An integer value as int64; an error (naming what) when it is not an integer or does not fit.
result<int64_t> to_int(std::string_view what, const gguf_value& v, std::string_view expected) {
  bool neg = false;
  uint64_t mag = 0;
  if (!integer_of(v, neg, mag))
    return make_error("gguf: ", what, " is ", describe_type(v), ", expected ", expected);
  constexpr uint64_t k_max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!neg && mag > k_max) {
    return make_error("gguf: ", what, " is ", describe_type(v), " with value ", mag,
                      ", which does not fit ", expected);
  }
  return neg ? static_cast<int64_t>(~(mag - 1)) : static_cast<int64_t>(mag);
}

bool float_of(const gguf_value& v, double& out) {
  if (const auto* f = std::get_if<float>(&v.v)) {
    out = *f;
    return true;
  }
  if (const auto* d = std::get_if<double>(&v.v)) {
    out = *d;
    return true;
  }
  return false;
}

}  // namespace

result<uint64_t> gguf_file::get_uint(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return missing(key);
  bool neg = false;
  uint64_t mag = 0;
  if (!integer_of(*v, neg, mag)) return mismatch(key, *v, "an unsigned integer");
  if (neg) {
    return make_error("gguf: key '", printable(key), "' is ", describe_type(*v), " with value ",
                      int_text(neg, mag), ", expected an unsigned integer");
  }
  return mag;
}

result<int64_t> gguf_file::get_int(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return missing(key);
  return to_int("key '" + printable(key) + "'", *v, "a signed 64-bit integer");
}

result<double> gguf_file::get_float(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return missing(key);
  double d = 0;
  if (!float_of(*v, d)) return mismatch(key, *v, "f32 or f64");
  return d;
}

result<bool> gguf_file::get_bool(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return missing(key);
  const auto* b = std::get_if<bool>(&v->v);
  if (!b) return mismatch(key, *v, "bool");
  return *b;
}

result<std::string> gguf_file::get_string(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return missing(key);
  const auto* s = std::get_if<std::string>(&v->v);
  if (!s) return mismatch(key, *v, "string");
  return *s;
}

result<std::vector<std::string>> gguf_file::get_string_array(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return missing(key);
  const auto* a = std::get_if<gguf_array>(&v->v);
  if (!a || a->elem_type != gguf_type::string) return mismatch(key, *v, "an array of string");
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (const gguf_value& item : a->items) {
    const auto* s = std::get_if<std::string>(&item.v);
    if (!s) return mismatch(key, item, "string items");  // only for hand-built, mixed arrays
    out.push_back(*s);
  }
  return out;
}

result<std::vector<int64_t>> gguf_file::get_int_array(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return missing(key);
  const auto* a = std::get_if<gguf_array>(&v->v);
  const gguf_type et = a ? a->elem_type : gguf_type::string;
  const bool integer_elems = et != gguf_type::f32 && et != gguf_type::f64 &&
                             et != gguf_type::boolean && et != gguf_type::string &&
                             et != gguf_type::array;
  if (!a || !integer_elems) return mismatch(key, *v, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(a->items.size());
  for (size_t i = 0; i < a->items.size(); ++i) {
    result<int64_t> x = to_int("key '" + printable(key) + "'[" + std::to_string(i) + "]",
                               a->items[i], "a signed 64-bit integer");
    if (!x) return x.err();
    out.push_back(*x);
  }
  return out;
}

result<std::vector<double>> gguf_file::get_float_array(std::string_view key) const {
  const gguf_value* v = find(key);
  if (!v) return missing(key);
  const auto* a = std::get_if<gguf_array>(&v->v);
  if (!a || (a->elem_type != gguf_type::f32 && a->elem_type != gguf_type::f64)) {
    return mismatch(key, *v, "an array of f32 or f64");
  }
  std::vector<double> out;
  out.reserve(a->items.size());
  for (const gguf_value& item : a->items) {
    double d = 0;
    if (!float_of(item, d)) return mismatch(key, item, "float items");
    out.push_back(d);
  }
  return out;
}

}  // namespace tandem
