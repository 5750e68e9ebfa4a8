// The safetensors reader: header validation (sizes, dtypes, offsets that must tile the data section
// exactly, as the reference implementation requires), mmap, sharded directories, float conversion.
#include "convert/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "quant/half.h"

namespace tandem {

namespace {

using json = nlohmann::json;

struct dtype_entry {
  st_dtype type;
  std::string_view name;
  uint32_t size;
};

constexpr dtype_entry k_dtypes[] = {
    {st_dtype::f64, "F64", 8},         {st_dtype::f32, "F32", 4},
    {st_dtype::f16, "F16", 2},         {st_dtype::bf16, "BF16", 2},
    {st_dtype::i64, "I64", 8},         {st_dtype::i32, "I32", 4},
    {st_dtype::i16, "I16", 2},         {st_dtype::i8, "I8", 1},
    {st_dtype::u8, "U8", 1},           {st_dtype::boolean, "BOOL", 1},
    {st_dtype::f8_e4m3, "F8_E4M3", 1}, {st_dtype::f8_e5m2, "F8_E5M2", 1},
};

std::optional<st_dtype> dtype_from_name(std::string_view s) {
  for (const auto& d : k_dtypes)
    if (d.name == s) return d.type;
  return std::nullopt;
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << ']';
  return os.str();
}

uint64_t load_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A JSON value that must be an array of non-negative integers; nullopt otherwise.
std::optional<std::vector<uint64_t>> as_u64_array(const json& j) {
  if (!j.is_array()) return std::nullopt;
  std::vector<uint64_t> out;
  for (const auto& e : j) {
    if (!e.is_number_unsigned()) return std::nullopt;
    out.push_back(e.get<uint64_t>());
  }
  return out;
}

// Parses the header JSON, refusing duplicate top-level keys (nlohmann would keep the last one).
result<json> parse_header_json(std::string_view text) {
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth == 1 && ev == json::parse_event_t::key && parsed.is_string()) {
      if (!seen.insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    return make_error("header is not valid JSON: ", e.what());
  }
  if (!duplicate.empty()) return make_error("header names \"", duplicate, "\" twice");
  if (!j.is_object()) return make_error("header is not a JSON object");
  return j;
}

}  // namespace

std::string_view st_dtype_name(st_dtype t) {
  for (const auto& d : k_dtypes)
    if (d.type == t) return d.name;
  return "?";
}

uint32_t st_dtype_size(st_dtype t) {
  for (const auto& d : k_dtypes)
    if (d.type == t) return d.size;
  return 0;
}

struct safetensors_file::mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~mapping() {
    if (addr) munmap(addr, size);
  }
};

safetensors_file::safetensors_file(safetensors_file&&) noexcept = default;
safetensors_file& safetensors_file::operator=(safetensors_file&&) noexcept = default;
safetensors_file::~safetensors_file() = default;

result<safetensors_file> safetensors_file::open(const std::string& path, const st_limits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error(path, ": cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(path, ": not a regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return make_error(path, ": file is ", size, " bytes, too small for the 8-byte header length");
  }
  void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (addr == MAP_FAILED) return make_error(path, ": mmap failed: ", std::strerror(e));

  safetensors_file f;
  f.map_ = std::make_unique<mapping>();
  f.map_->addr = addr;
  f.map_->size = size;
  f.path_ = std::make_unique<std::string>(path);
  auto s = f.parse_header({static_cast<const uint8_t*>(addr), size}, limits);
  if (!s) return s.err();
  return f;
}

result<safetensors_file> safetensors_file::parse(std::span<const uint8_t> bytes, std::string label,
                                                 const st_limits& limits) {
  safetensors_file f;
  f.path_ = std::make_unique<std::string>(std::move(label));
  auto s = f.parse_header(bytes, limits);
  if (!s) return s.err();
  return f;
}

namespace {

// One tensor entry of the header, checked: dtype, shape, data_offsets within the data section.
result<st_tensor> parse_entry(const std::string& file, const std::string& key, const nlohmann::json& val,
                              std::span<const uint8_t> data, const st_limits& limits) {
  auto fail = [&](const auto&... parts) { return make_error(file, ": tensor \"", key, "\": ", parts...); };
  if (!val.is_object()) return fail("entry is not an object");
  if (!val.contains("dtype") || !val["dtype"].is_string()) return fail("missing string field dtype");
  const auto dtype = dtype_from_name(val["dtype"].get<std::string>());
  if (!dtype) return fail("unknown dtype \"", val["dtype"].get<std::string>(), "\"");
  if (!val.contains("shape")) return fail("missing field shape");
  auto shape = as_u64_array(val["shape"]);
  if (!shape) return fail("shape is not an array of non-negative integers");
  if (shape->size() > limits.max_dims)
    return fail("shape has ", shape->size(), " dimensions (limit ", limits.max_dims, ")");
  if (!val.contains("data_offsets")) return fail("missing field data_offsets");
  auto offs = as_u64_array(val["data_offsets"]);
  if (!offs || offs->size() != 2) return fail("data_offsets is not a pair of non-negative integers");
  const uint64_t begin = (*offs)[0], end = (*offs)[1];

  uint64_t elems = 1;
  for (uint64_t d : *shape) {
    if (d != 0 && elems > UINT64_MAX / d) return fail("shape ", shape_string(*shape), " overflows");
    elems *= d;
  }
  const uint32_t esize = st_dtype_size(*dtype);
  if (elems > UINT64_MAX / esize) return fail("shape ", shape_string(*shape), " overflows");
  if (begin > end) return fail("data_offsets [", begin, ",", end, "] are reversed");
  if (end - begin != elems * esize)
    return fail("dtype ", st_dtype_name(*dtype), " shape ", shape_string(*shape), " needs ", elems * esize,
                " bytes but data_offsets [", begin, ",", end, "] span ", end - begin);
  if (end > data.size())
    return fail("data_offsets [", begin, ",", end, "] run past the end of the data (", data.size(), " bytes)");
  st_tensor t;
  t.name = key;
  t.dtype = *dtype;
  t.shape = std::move(*shape);
  t.n_elements = elems;
  t.data = data.subspan(begin, end - begin);
  return t;
}

// The reference implementation requires the tensors (sorted by offset) to tile the data
// section: no overlap, no hole.
status check_tiling(const std::string& file, const std::vector<st_tensor>& tensors, std::span<const uint8_t> data) {
  uint64_t pos = 0;
  const st_tensor* prev = nullptr;
  for (const auto& t : tensors) {
    const uint64_t begin = static_cast<uint64_t>(t.data.data() - data.data());
    if (begin < pos)
      return make_error(file, ": tensor \"", t.name, "\" at data offset ", begin, " overlaps tensor \"",
                        prev->name, "\" (which ends at ", pos, ")");
    if (begin > pos)
      return make_error(file, ": hole in the data section before tensor \"", t.name, "\" (bytes ", pos, " to ",
                        begin, " belong to no tensor)");
    pos = begin + t.data.size();
    prev = &t;
  }
  if (pos != data.size())
    return make_error(file, ": data section is ", data.size(), " bytes but the tensors cover ", pos);
  return {};
}

}  // namespace

status safetensors_file::parse_header(std::span<const uint8_t> bytes, const st_limits& limits) {
  const std::string& file = *path_;
  if (bytes.size() < 8)
    return make_error(file, ": file is ", bytes.size(), " bytes, too small for the 8-byte header length");
  const uint64_t n = load_u64_le(bytes.data());
  if (n > limits.max_header_bytes)
    return make_error(file, ": header length ", n, " exceeds the limit of ", limits.max_header_bytes);
  if (n > bytes.size() - 8)
    return make_error(file, ": header length ", n, " runs past the end of the file (", bytes.size(), " bytes)");
  if (n < 2 || bytes[8] != '{')
    return make_error(file, ": header does not start with '{' (header length ", n, ")");
  auto header = parse_header_json({reinterpret_cast<const char*>(bytes.data() + 8), n});
  if (!header) return make_error(file, ": ", header.message());

  const std::span<const uint8_t> data = bytes.subspan(8 + n);
  for (const auto& [key, val] : header->items()) {
    if (key == "__metadata__") {
      if (!val.is_object()) return make_error(file, ": __metadata__ is not an object");
      for (const auto& [mk, mv] : val.items()) {
        if (!mv.is_string()) return make_error(file, ": __metadata__ value \"", mk, "\" is not a string");
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    auto t = parse_entry(file, key, val, data, limits);
    if (!t) return t.err();
    t->file = path_.get();
    tensors_.push_back(std::move(*t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const st_tensor& a, const st_tensor& b) {
    return a.data.data() != b.data.data() ? a.data.data() < b.data.data() : a.data.size() < b.data.size();
  });
  return check_tiling(file, tensors_, data);
}

const st_tensor* safetensors_file::find(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

status safetensors_model::add_file(safetensors_file file) {
  for (const auto& t : file.tensors()) {
    auto it = by_name_.find(t.name);
    if (it != by_name_.end())
      return make_error("tensor \"", t.name, "\" appears in both ", *it->second->file, " and ",
                        file.path());
  }
  files_.push_back(std::move(file));
  // Tensor addresses survive the move: the vector's buffer is handed over, not copied.
  for (const auto& t : files_.back().tensors()) by_name_.emplace(t.name, &t);
  return {};
}

result<safetensors_model> safetensors_model::open_dir(const std::string& dir,
                                                      const st_limits& limits) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return make_error(dir, ": not a directory");
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> names;
  std::map<std::string, std::string> weight_map;
  if (fs::exists(index_path, ec)) {
    std::ifstream in(index_path);
    json j;
    try {
      j = json::parse(in);
    } catch (const json::exception& e) {
      return make_error(index_path.string(), ": not valid JSON: ", e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      return make_error(index_path.string(), ": missing object weight_map");
    std::set<std::string> unique;
    for (const auto& [tensor, f] : j["weight_map"].items()) {
      if (!f.is_string())
        return make_error(index_path.string(), ": weight_map[\"", tensor, "\"] is not a string");
      const auto fname = f.get<std::string>();
      if (fname.empty() || fname.find('/') != std::string::npos || fname == "." || fname == "..")
        return make_error(index_path.string(), ": weight_map[\"", tensor, "\"] names \"", fname,
                          "\", not a file in the model directory");
      weight_map[tensor] = fname;
      if (unique.insert(fname).second) names.push_back(fname);
    }
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") names.push_back(e.path().filename().string());
    if (ec) return make_error(dir, ": cannot list: ", ec.message());
    std::sort(names.begin(), names.end());
  }
  if (names.empty()) return make_error(dir, ": no *.safetensors files");

  safetensors_model m;
  for (const auto& name : names) {
    auto f = safetensors_file::open((fs::path(dir) / name).string(), limits);
    if (!f) return f.err();
    TANDEM_TRY(m.add_file(std::move(*f)));
  }
  for (const auto& [tensor, fname] : weight_map) {
    const st_tensor* t = m.find(tensor);
    if (!t) return make_error(index_path.string(), ": tensor \"", tensor, "\" is not in ", fname);
    if (fs::path(*t->file).filename() != fname)
      return make_error(index_path.string(), ": tensor \"", tensor, "\" is listed in ", fname,
                        " but found in ", *t->file);
  }
  return m;
}

const st_tensor* safetensors_model::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

std::vector<const st_tensor*> safetensors_model::tensors() const {
  std::vector<const st_tensor*> out;
  for (const auto& [name, t] : by_name_) out.push_back(t);
  return out;
}

status read_floats(const st_tensor& t, uint64_t first, uint64_t count, float* out) {
  if (first > t.n_elements || count > t.n_elements - first)
    return make_error("tensor \"", t.name, "\": elements [", first, ",", first + count,
                      ") are past its end (", t.n_elements, ")");
  if (count == 0) return {};  // an empty tensor's data (and out) may be null: no memcpy of them
  const uint32_t esize = st_dtype_size(t.dtype);
  const uint8_t* p = t.data.data() + first * esize;
  switch (t.dtype) {
    case st_dtype::f32:
      std::memcpy(out, p, count * sizeof(float));
      return {};
    case st_dtype::f64:
      for (uint64_t i = 0; i < count; ++i) {
        double d;
        std::memcpy(&d, p + i * 8, 8);
        out[i] = static_cast<float>(d);
      }
      return {};
    case st_dtype::f16:
    case st_dtype::bf16: {
      const bool half = t.dtype == st_dtype::f16;
      for (uint64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, p + i * 2, 2);
        out[i] = half ? fp16_to_fp32(h) : bf16_to_fp32(h);
      }
      return {};
    }
    default:
      return make_error(*t.file, ": tensor \"", t.name, "\" has dtype ", st_dtype_name(t.dtype),
                        "; only F64, F32, F16 and BF16 convert to float");
  }
}

}  // namespace tandem
