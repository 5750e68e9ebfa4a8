// libFuzzer target for the safetensors reader (the weights `tandem-model import` takes from a
// downloaded Hugging Face directory). A crash, a sanitizer report or a trap is a bug; the traps:
// a parsed tensor whose bytes lie outside the input or do not match its dtype and shape, and a
// float tensor that read_floats cannot read whole. Also built without libFuzzer as the corpus
// replay test (safetensors_fuzz_corpus_test).
#include <cstdint>
#include <span>
#include <vector>

#include "convert/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  const std::span<const uint8_t> bytes(data, size);
  auto f = safetensors_file::parse(bytes, "fuzz");
  if (!f) return 0;
  std::vector<float> out;
  for (const st_tensor& t : f->tensors()) {
    if (t.data.size() && (t.data.data() < data || t.data.data() + t.data.size() > data + size)) __builtin_trap();
    if (t.data.size() != t.n_elements * st_dtype_size(t.dtype)) __builtin_trap();
    if (f->find(t.name) != &t) __builtin_trap();
    const bool is_float = t.dtype == st_dtype::f64 || t.dtype == st_dtype::f32 || t.dtype == st_dtype::f16 ||
                          t.dtype == st_dtype::bf16;
    if (!is_float || t.n_elements > (1u << 20)) continue;
    out.resize(t.n_elements);
    if (!read_floats(t, 0, t.n_elements, out.data()).ok()) __builtin_trap();
    if (t.n_elements > 0 && read_floats(t, t.n_elements - 1, 2, out.data()).ok()) __builtin_trap();  // past the end
  }
  return 0;
}
