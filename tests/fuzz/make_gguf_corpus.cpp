// Writes the GGUF fuzz seed corpus: small valid files (valid_*) and one malformed file per attack
// class (bad_*), each under 4 KB, named without a .gguf suffix (.gitignore ignores *.gguf). Run
// once and commit the output:
//   gguf_make_corpus tests/fuzz/corpus/gguf
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gguf/gguf_writer.h"
#include "gguf_bytes.h"

using namespace tandem;
using test::gguf_bytes;

namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

std::vector<uint8_t> must(result<std::vector<uint8_t>> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.message().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

void check(status s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    std::exit(1);
  }
}

gguf_value arr(gguf_type et, std::vector<gguf_value> items) {
  return gguf_value{gguf_array{et, std::move(items)}};
}

std::vector<uint8_t> metadata_file() {
  gguf_writer w;
  w.set("u8", gguf_value{uint8_t{200}});
  w.set("i8", gguf_value{int8_t{-100}});
  w.set("u16", gguf_value{uint16_t{60000}});
  w.set("i16", gguf_value{int16_t{-30000}});
  w.set_u32("u32", 123456);
  w.set("i32", gguf_value{int32_t{-123456}});
  w.set_f32("f32", 0.125f);
  w.set_bool("bool", true);
  w.set_string("str", "h\xC3\xA9llo");
  w.set_string("empty", "");
  w.set("u64", gguf_value{uint64_t{1} << 40});
  w.set("i64", gguf_value{int64_t{-1} << 40});
  w.set("f64", gguf_value{2.5});
  w.set("a.str", gguf_string_array({"a", "", "bc"}));
  w.set("a.i32", gguf_i32_array({1, -2}));
  w.set("a.f32", gguf_f32_array({0.5f}));
  w.set("a.bool", arr(gguf_type::boolean, {gguf_value{false}, gguf_value{true}}));
  w.set("a.empty", arr(gguf_type::u64, {}));
  w.set("a.nested", arr(gguf_type::array, {gguf_i32_array({3}), gguf_i32_array({})}));
  return must(w.write_to_memory());
}

std::vector<uint8_t> tensors_file(uint32_t alignment) {
  gguf_writer w(alignment);
  w.set_string("general.architecture", "test");
  check(w.add_tensor("f32", ggml_type::f32, {4, 2}, pattern(32, 1)));
  check(w.add_tensor("f16", ggml_type::f16, {3}, pattern(6, 2)));
  check(w.add_tensor("q4_0", ggml_type::q4_0, {32, 2}, pattern(36, 3)));
  check(w.add_tensor("q8_0", ggml_type::q8_0, {32}, pattern(34, 4)));
  check(w.add_tensor("q4_k", ggml_type::q4_k, {256}, pattern(144, 5)));
  check(w.add_tensor("bf16", ggml_type::bf16, {2, 1, 1, 2}, pattern(8, 6)));
  return must(w.write_to_memory());
}

std::vector<uint8_t> model_like_file() {
  gguf_writer w;
  w.set_string("general.architecture", "qwen3");
  w.set_string("general.name", "tiny");
  w.set_u32("qwen3.block_count", 1);
  w.set_u32("qwen3.context_length", 64);
  w.set_u32("qwen3.embedding_length", 32);
  w.set_u32("qwen3.attention.head_count", 2);
  w.set_f32("qwen3.rope.freq_base", 1000000.f);
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.tokens", gguf_string_array({"a", "b", "ab", "<|im_end|>"}));
  w.set("tokenizer.ggml.token_type", gguf_i32_array({1, 1, 1, 3}));
  w.set("tokenizer.ggml.merges", gguf_string_array({"a b"}));
  check(w.add_tensor("token_embd.weight", ggml_type::q8_0, {32, 4}, pattern(34 * 4, 9)));
  check(w.add_tensor("blk.0.attn_norm.weight", ggml_type::f32, {32}, pattern(128, 10)));
  check(w.add_tensor("output_norm.weight", ggml_type::f32, {32}, pattern(128, 11)));
  return must(w.write_to_memory());
}

void put(const std::filesystem::path& dir, const std::string& name,
         const std::vector<uint8_t>& bytes) {
  if (bytes.size() >= 4096) {
    std::fprintf(stderr, "%s is %zu bytes (limit 4096)\n", name.c_str(), bytes.size());
    std::exit(1);
  }
  std::ofstream out(dir / name, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);

  put(dir, "valid_empty", must(gguf_writer().write_to_memory()));
  put(dir, "valid_metadata", metadata_file());
  put(dir, "valid_tensors", tensors_file(32));
  put(dir, "valid_align64", tensors_file(64));
  put(dir, "valid_model_like", model_like_file());
  {
    gguf_bytes b;
    b.header(1, 1, 2)
        .kv_u32("general.alignment", 16)
        .tensor_info("w", {4}, 0, 0)
        .pad_to(16)
        .zeros(16);
    put(dir, "valid_v2_align16", b.b);
  }

  const std::vector<uint8_t> good = tensors_file(32);
  {
    auto b = good;
    b[3] = 'X';
    put(dir, "bad_magic", b);
  }
  {
    gguf_bytes b;
    b.header(0, 0, 1);
    put(dir, "bad_version1", b.b);
  }
  put(dir, "bad_truncated",
      std::vector<uint8_t>(good.begin(), good.begin() + good.size() / 2));
  {
    gguf_bytes b;
    b.header(1 << 30, 1 << 30).zeros(64);
    put(dir, "bad_huge_counts", b.b);
  }
  {
    gguf_bytes b;
    b.header(0, 1).key("s", 8).u64(~uint64_t{0}).raw("abc");
    put(dir, "bad_huge_string", b.b);
  }
  {
    gguf_bytes b;
    b.header(0, 1).key("a", 9).u32(4).u64(uint64_t{1} << 40).zeros(16);
    put(dir, "bad_huge_array", b.b);
  }
  {
    gguf_bytes b;
    b.header(0, 1).key("n", 9);
    for (int i = 0; i < 6; ++i) b.u32(9).u64(1);
    b.u32(0).u64(0);
    put(dir, "bad_nested", b.b);
  }
  {
    gguf_bytes b;
    b.header(0, 2).kv_u32("k", 1).kv_u32("k", 2);
    put(dir, "bad_duplicate_key", b.b);
  }
  {
    gguf_bytes b;
    b.header(0, 1).key("b", 7).u8(2);
    put(dir, "bad_bool", b.b);
  }
  {
    gguf_bytes b;
    b.header(0, 1).key("v", 13).u32(0);
    put(dir, "bad_value_type", b.b);
  }
  {
    gguf_bytes b;
    b.header(1, 1).kv_u32("general.alignment", 48).tensor_info("w", {4}, 0, 0).pad_to(48).zeros(16);
    put(dir, "bad_alignment", b.b);
  }
  {
    gguf_bytes b;
    b.header(2, 0).tensor_info("w", {4}, 0, 0).tensor_info("w", {4}, 0, 32).pad_to(32).zeros(48);
    put(dir, "bad_duplicate_tensor", b.b);
  }
  {
    gguf_bytes b;
    b.header(1, 0)
        .str("w")
        .u32(5)
        .u64(1)
        .u64(1)
        .u64(1)
        .u64(1)
        .u64(1)
        .u32(0)
        .u64(0)
        .pad_to(32)
        .zeros(4);
    put(dir, "bad_n_dims", b.b);
  }
  {
    gguf_bytes b;
    b.header(1, 0).tensor_info("w", {4, 0}, 0, 0).pad_to(32).zeros(16);
    put(dir, "bad_zero_dim", b.b);
  }
  {
    gguf_bytes b;
    b.header(1, 0)
        .tensor_info("w", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0)
        .pad_to(32)
        .zeros(16);
    put(dir, "bad_dims_overflow", b.b);
  }
  {
    gguf_bytes b;
    b.header(1, 0).tensor_info("w", {32}, 4, 0).pad_to(32).zeros(32);
    put(dir, "bad_tensor_type", b.b);
  }
  {
    gguf_bytes b;
    b.header(1, 0).tensor_info("w", {33}, 2, 0).pad_to(32).zeros(64);
    put(dir, "bad_row_block", b.b);
  }
  {
    gguf_bytes b;
    b.header(2, 0).tensor_info("a", {16}, 0, 0).tensor_info("b", {16}, 0, 32).pad_to(32).zeros(128);
    put(dir, "bad_overlap", b.b);
  }
  {
    gguf_bytes b;
    b.header(2, 0)
        .tensor_info("a", {16}, 0, 0)
        .tensor_info("b", {16}, 0, 128)
        .pad_to(32)
        .zeros(256);
    put(dir, "bad_gap", b.b);
  }
  {
    gguf_bytes b;
    b.header(1, 0).tensor_info("a", {16}, 0, 8).pad_to(32).zeros(128);
    put(dir, "bad_misaligned", b.b);
  }
  {
    gguf_bytes b;
    b.header(1, 0).tensor_info("a", {256}, 0, 0).pad_to(32).zeros(100);
    put(dir, "bad_past_eof", b.b);
  }
  std::printf("wrote the corpus to %s\n", dir.c_str());
  return 0;
}
