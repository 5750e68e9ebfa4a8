// libFuzzer target for the GGUF reader. Parses the input, reads everything the parsed file
// exposes, and for files that parse, writes them back with gguf_writer and checks that the copy
// parses to the same metadata and tensor bytes (a crash, a sanitizer report or a trap is a bug).
// Also built without libFuzzer as the corpus replay test (gguf_fuzz_corpus_test).
#include <cstdint>
#include <cstring>
#include <span>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

namespace {

using namespace tandem;

[[noreturn]] void bug() { __builtin_trap(); }

uint64_t touch_value(const gguf_value& v) {
  uint64_t h = static_cast<uint64_t>(v.type());
  if (const auto* a = std::get_if<gguf_array>(&v.v)) {
    if (static_cast<uint32_t>(a->elem_type) > 12) bug();
    for (const auto& item : a->items) {
      if (item.type() != a->elem_type) bug();  // the reader builds homogeneous arrays
      h += touch_value(item);
    }
  } else if (const auto* s = std::get_if<std::string>(&v.v)) {
    for (char c : *s) h = h * 31 + static_cast<unsigned char>(c);
  }
  return h;
}

bool same_value(const gguf_value& a, const gguf_value& b) {
  if (a.type() != b.type()) return false;
  return std::visit(
      [&](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        const T& y = std::get<T>(b.v);
        if constexpr (std::is_same_v<T, gguf_array>) {
          if (x.elem_type != y.elem_type || x.items.size() != y.items.size()) return false;
          for (size_t i = 0; i < x.items.size(); ++i) {
            if (!same_value(x.items[i], y.items[i])) return false;
          }
          return true;
        } else if constexpr (std::is_floating_point_v<T>) {
          return std::memcmp(&x, &y, sizeof x) == 0;  // NaN payloads included
        } else {
          return x == y;
        }
      },
      a.v);
}

uint64_t touch(const gguf_file& f) {
  uint64_t h = f.version() + f.alignment() + f.data_offset();
  if (f.alignment() == 0 || (f.alignment() & (f.alignment() - 1)) != 0) bug();
  for (const auto& kv : f.metadata()) {
    if (f.find(kv.key) != &kv.value) bug();
    h += touch_value(kv.value);
    if (auto r = f.get_uint(kv.key)) h += *r;
    if (auto r = f.get_int(kv.key)) h += static_cast<uint64_t>(*r);
    if (auto r = f.get_float(kv.key)) h += static_cast<uint64_t>(*r != 0);
    if (auto r = f.get_bool(kv.key)) h += *r;
    if (auto r = f.get_string(kv.key)) h += r->size();
    if (auto r = f.get_string_array(kv.key)) h += r->size();
    if (auto r = f.get_int_array(kv.key)) h += r->size();
    if (auto r = f.get_float_array(kv.key)) h += r->size();
  }
  for (const auto& t : f.tensors()) {
    if (f.find_tensor(t.name) != &t) bug();
    if (t.n_dims < 1 || t.n_dims > 4 || t.n_bytes == 0 || t.offset % f.alignment() != 0) bug();
    if (f.data_offset() + t.offset + t.n_bytes > f.file_size()) bug();
    for (uint64_t i = 0; i < t.n_bytes; ++i) h += t.data[i];
  }
  return h;
}

// Writes f back out and checks the copy parses to the same content.
void round_trip(const gguf_file& f) {
  gguf_writer w(f.alignment());
  for (const auto& kv : f.metadata()) w.set(kv.key, kv.value);
  for (const auto& t : f.tensors()) {
    std::vector<uint64_t> dims(t.dims, t.dims + t.n_dims);
    if (!w.add_tensor(t.name, t.type, dims, std::vector<uint8_t>(t.data, t.data + t.n_bytes)).ok())
      bug();
  }
  auto bytes = w.write_to_memory();
  if (!bytes.ok()) bug();
  auto g = gguf_file::parse(*bytes);
  if (!g.ok()) bug();
  if (g->alignment() != f.alignment() || g->metadata().size() != f.metadata().size() ||
      g->tensors().size() != f.tensors().size()) {
    bug();
  }
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    if (g->metadata()[i].key != f.metadata()[i].key) bug();
    if (!same_value(g->metadata()[i].value, f.metadata()[i].value)) bug();
  }
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const gguf_tensor& a = f.tensors()[i];
    const gguf_tensor& b = g->tensors()[i];
    if (a.name != b.name || a.type != b.type || a.n_dims != b.n_dims || a.n_bytes != b.n_bytes)
      bug();
    if (std::memcmp(a.dims, b.dims, sizeof a.dims) != 0) bug();
    if (std::memcmp(a.data, b.data, a.n_bytes) != 0) bug();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = gguf_file::parse(std::span<const uint8_t>(data, size));
  if (!f.ok()) {
    if (f.message().rfind("gguf: ", 0) != 0)
      bug();  // every error is a reader error with its prefix
    return 0;
  }
  volatile uint64_t sink = touch(*f);
  (void)sink;
  round_trip(*f);
  return 0;
}
