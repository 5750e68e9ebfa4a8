// Writer -> reader round trips: every metadata type, nested and empty arrays, tensors of several
// types compared byte for byte, alignment 32 and 64, files on disk; typed getters and their errors.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

#define EXPECT_HAS(msg, part) \
  EXPECT_NE(std::string(msg).find(part), std::string::npos) << "message: " << (msg)

gguf_value arr(gguf_type et, std::vector<gguf_value> items) {
  return gguf_value{gguf_array{et, std::move(items)}};
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// Metadata of every wire type, including edge values, empty and nested arrays.
void add_all_metadata(gguf_writer& w) {
  w.set("t.u8", gguf_value{uint8_t{255}});
  w.set("t.i8", gguf_value{int8_t{-128}});
  w.set("t.u16", gguf_value{uint16_t{65535}});
  w.set("t.i16", gguf_value{int16_t{-32768}});
  w.set_u32("t.u32", 4000000000u);
  w.set("t.i32", gguf_value{int32_t{-2000000000}});
  w.set_f32("t.f32", -1.5f);
  w.set_bool("t.true", true);
  w.set_bool("t.false", false);
  w.set_string("t.str", "hello");
  w.set_string("t.empty", "");
  w.set_string("t.utf8", "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x8E\x89");  // héllo 世界 🎉
  w.set("t.u64", gguf_value{std::numeric_limits<uint64_t>::max()});
  w.set("t.i64", gguf_value{std::numeric_limits<int64_t>::min()});
  w.set("t.f64", gguf_value{3.141592653589793});
  w.set("a.u8", arr(gguf_type::u8, {gguf_value{uint8_t{1}}, gguf_value{uint8_t{2}}}));
  w.set("a.i8", arr(gguf_type::i8, {gguf_value{int8_t{-1}}}));
  w.set("a.u16", arr(gguf_type::u16, {gguf_value{uint16_t{7}}, gguf_value{uint16_t{65535}}}));
  w.set("a.i16", arr(gguf_type::i16, {gguf_value{int16_t{-7}}}));
  w.set("a.u32", arr(gguf_type::u32, {gguf_value{uint32_t{1}}, gguf_value{uint32_t{4000000000u}}}));
  w.set("a.i32", gguf_i32_array({1, -2, 3}));
  w.set("a.f32", gguf_f32_array({0.5f, -0.25f}));
  w.set("a.bool", arr(gguf_type::boolean, {gguf_value{true}, gguf_value{false}, gguf_value{true}}));
  w.set("a.str", gguf_string_array({"a", "", "\xE4\xB8\x96", "long string with spaces"}));
  w.set("a.u64", arr(gguf_type::u64, {gguf_value{uint64_t{1} << 63}}));
  w.set("a.i64", arr(gguf_type::i64, {gguf_value{int64_t{-5}}, gguf_value{int64_t{5}}}));
  w.set("a.f64", arr(gguf_type::f64, {gguf_value{1e300}, gguf_value{-0.0}}));
  for (uint32_t t = 0; t <= 12; ++t) {  // an empty array of every element type
    w.set("empty." + std::string(gguf_type_name(static_cast<gguf_type>(t))),
          arr(static_cast<gguf_type>(t), {}));
  }
  // [[1, 2], [], [3]] and [[["x"]], []]
  w.set("n.i32",
        arr(gguf_type::array, {gguf_i32_array({1, 2}), gguf_i32_array({}), gguf_i32_array({3})}));
  w.set("n.deep", arr(gguf_type::array, {arr(gguf_type::array, {gguf_string_array({"x"})}),
                                         arr(gguf_type::array, {})}));
}

struct tensor_spec {
  std::string name;
  ggml_type type;
  std::vector<uint64_t> dims;
  std::vector<uint8_t> bytes;
};

std::vector<tensor_spec> make_tensors() {
  std::vector<tensor_spec> ts = {
      {"f32.w", ggml_type::f32, {4, 3}, {}},     {"f16.w", ggml_type::f16, {9}, {}},
      {"q4_0.w", ggml_type::q4_0, {64, 2}, {}},  {"q8_0.w", ggml_type::q8_0, {32, 3, 2}, {}},
      {"q4_k.w", ggml_type::q4_k, {256, 2}, {}}, {"q6_k.w", ggml_type::q6_k, {512, 1, 1, 2}, {}},
      {"bf16.w", ggml_type::bf16, {5, 5}, {}},   {"i32.w", ggml_type::i32, {1}, {}},
  };
  uint32_t seed = 1;
  for (auto& t : ts) {
    uint64_t n = 1;
    for (uint64_t d : t.dims) n *= d;
    const ggml_type_info& info = type_info(t.type);
    t.bytes = random_bytes(n / info.block_size * info.type_size, seed++);
  }
  return ts;
}

void check_all_metadata(const gguf_file& f) {
  EXPECT_EQ(std::get<uint8_t>(f.find("t.u8")->v), 255);
  EXPECT_EQ(std::get<int8_t>(f.find("t.i8")->v), -128);
  EXPECT_EQ(std::get<uint16_t>(f.find("t.u16")->v), 65535);
  EXPECT_EQ(std::get<int16_t>(f.find("t.i16")->v), -32768);
  EXPECT_EQ(std::get<uint32_t>(f.find("t.u32")->v), 4000000000u);
  EXPECT_EQ(std::get<int32_t>(f.find("t.i32")->v), -2000000000);
  EXPECT_EQ(std::get<float>(f.find("t.f32")->v), -1.5f);
  EXPECT_EQ(std::get<bool>(f.find("t.true")->v), true);
  EXPECT_EQ(std::get<bool>(f.find("t.false")->v), false);
  EXPECT_EQ(std::get<std::string>(f.find("t.str")->v), "hello");
  EXPECT_EQ(std::get<std::string>(f.find("t.empty")->v), "");
  EXPECT_EQ(std::get<std::string>(f.find("t.utf8")->v),
            "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C \xF0\x9F\x8E\x89");
  EXPECT_EQ(std::get<uint64_t>(f.find("t.u64")->v), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(std::get<int64_t>(f.find("t.i64")->v), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(std::get<double>(f.find("t.f64")->v), 3.141592653589793);

  for (uint32_t t = 0; t <= 12; ++t) {
    const auto et = static_cast<gguf_type>(t);
    const gguf_value* v = f.find("empty." + std::string(gguf_type_name(et)));
    ASSERT_NE(v, nullptr);
    const auto& a = std::get<gguf_array>(v->v);
    EXPECT_EQ(a.elem_type, et);
    EXPECT_TRUE(a.items.empty());
  }
  const auto& u16 = std::get<gguf_array>(f.find("a.u16")->v);
  EXPECT_EQ(u16.elem_type, gguf_type::u16);
  ASSERT_EQ(u16.items.size(), 2u);
  EXPECT_EQ(std::get<uint16_t>(u16.items[1].v), 65535);
  const auto& b = std::get<gguf_array>(f.find("a.bool")->v);
  ASSERT_EQ(b.items.size(), 3u);
  EXPECT_EQ(std::get<bool>(b.items[0].v), true);
  EXPECT_EQ(std::get<bool>(b.items[1].v), false);
  const auto& f64 = std::get<gguf_array>(f.find("a.f64")->v);
  EXPECT_EQ(std::get<double>(f64.items[0].v), 1e300);
  EXPECT_TRUE(std::signbit(std::get<double>(f64.items[1].v)));
  EXPECT_EQ(std::get<uint64_t>(std::get<gguf_array>(f.find("a.u64")->v).items[0].v),
            uint64_t{1} << 63);

  EXPECT_EQ(*f.get_string_array("a.str"),
            (std::vector<std::string>{"a", "", "\xE4\xB8\x96", "long string with spaces"}));
  EXPECT_EQ(*f.get_int_array("a.i32"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*f.get_int_array("a.u8"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(*f.get_int_array("a.i8"), (std::vector<int64_t>{-1}));
  EXPECT_EQ(*f.get_int_array("a.i16"), (std::vector<int64_t>{-7}));
  EXPECT_EQ(*f.get_int_array("a.u32"), (std::vector<int64_t>{1, 4000000000}));
  EXPECT_EQ(*f.get_int_array("a.i64"), (std::vector<int64_t>{-5, 5}));
  EXPECT_EQ(*f.get_float_array("a.f32"), (std::vector<double>{0.5, -0.25}));

  const auto& n = std::get<gguf_array>(f.find("n.i32")->v);
  EXPECT_EQ(n.elem_type, gguf_type::array);
  ASSERT_EQ(n.items.size(), 3u);
  EXPECT_EQ(std::get<gguf_array>(n.items[0].v).items.size(), 2u);
  EXPECT_EQ(std::get<int32_t>(std::get<gguf_array>(n.items[0].v).items[1].v), 2);
  EXPECT_TRUE(std::get<gguf_array>(n.items[1].v).items.empty());
  EXPECT_EQ(std::get<gguf_array>(n.items[1].v).elem_type, gguf_type::i32);
  const auto& deep = std::get<gguf_array>(f.find("n.deep")->v);
  const auto& lvl2 = std::get<gguf_array>(deep.items[0].v);
  const auto& lvl3 = std::get<gguf_array>(lvl2.items[0].v);
  EXPECT_EQ(std::get<std::string>(lvl3.items[0].v), "x");
  EXPECT_EQ(std::get<gguf_array>(deep.items[1].v).elem_type, gguf_type::array);
}

void check_tensors(const gguf_file& f, const std::vector<tensor_spec>& ts, uint32_t alignment,
                   const uint8_t* base) {
  ASSERT_EQ(f.tensors().size(), ts.size());
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  for (size_t i = 0; i < ts.size(); ++i) {
    const gguf_tensor& t = f.tensors()[i];
    SCOPED_TRACE(ts[i].name);
    EXPECT_EQ(t.name, ts[i].name);
    EXPECT_EQ(t.type, ts[i].type);
    ASSERT_EQ(t.n_dims, ts[i].dims.size());
    uint64_t n = 1;
    for (uint32_t d = 0; d < 4; ++d) {
      EXPECT_EQ(t.dims[d], d < t.n_dims ? ts[i].dims[d] : 1u);
      n *= t.dims[d];
    }
    EXPECT_EQ(t.n_elements, n);
    EXPECT_EQ(t.offset % alignment, 0u);
    ASSERT_EQ(t.n_bytes, ts[i].bytes.size());
    ASSERT_NE(t.data, nullptr);
    EXPECT_EQ(t.data, base + f.data_offset() + t.offset);
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), ts[i].bytes);
    EXPECT_EQ(f.find_tensor(ts[i].name), &t);
  }
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

class roundtrip : public ::testing::TestWithParam<uint32_t> {};

TEST_P(roundtrip, memory_every_type_and_tensors) {
  const uint32_t alignment = GetParam();
  gguf_writer w(alignment);
  add_all_metadata(w);
  const auto ts = make_tensors();
  for (const auto& t : ts) ASSERT_TRUE(w.add_tensor(t.name, t.type, t.dims, t.bytes).ok());
  uint64_t total = 0;
  for (const auto& t : ts) total += t.bytes.size();
  EXPECT_EQ(w.tensor_data_bytes(), total);

  auto bytes = w.write_to_memory();
  ASSERT_TRUE(bytes.ok()) << bytes.message();
  auto f = gguf_file::parse(*bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), alignment);
  EXPECT_EQ(f->file_size(), bytes->size());
  EXPECT_EQ(bytes->size() % alignment, 0u);  // every tensor, the last included, is padded
  check_all_metadata(*f);
  check_tensors(*f, ts, alignment, bytes->data());
  if (alignment == 32) {
    EXPECT_EQ(f->find("general.alignment"), nullptr);
  } else {
    EXPECT_EQ(*f->get_uint("general.alignment"), alignment);
  }
  // Writing again gives the same bytes.
  EXPECT_EQ(*w.write_to_memory(), *bytes);
}

TEST_P(roundtrip, file_streams_with_producers) {
  const uint32_t alignment = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("tandem_gguf_rt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "model.gguf").string();

  gguf_writer w(alignment);
  w.set_string("general.architecture", "test");
  const auto ts = make_tensors();
  std::vector<std::pair<const void*, size_t>> buffers;  // the buffer each producer was handed
  for (const auto& t : ts) {
    auto fill = [&t, &buffers](std::span<uint8_t> out) -> status {
      buffers.emplace_back(out.data(), out.size());
      if (out.size() != t.bytes.size()) return make_error("size mismatch");
      std::copy(t.bytes.begin(), t.bytes.end(), out.begin());
      return {};
    };
    ASSERT_TRUE(w.add_tensor(t.name, t.type, t.dims, fill).ok());
  }
  std::vector<std::tuple<size_t, size_t, uint64_t, uint64_t>> calls;
  status st = w.write(
      path, [&](size_t i, size_t n, uint64_t b, uint64_t tb) { calls.emplace_back(i, n, b, tb); });
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(calls.size(), ts.size());
  EXPECT_EQ(std::get<0>(calls.back()), ts.size());
  EXPECT_EQ(std::get<2>(calls.back()), w.tensor_data_bytes());
  EXPECT_EQ(std::get<3>(calls.back()), w.tensor_data_bytes());
  ASSERT_EQ(buffers.size(), ts.size());

  auto f = gguf_file::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(*f->get_string("general.architecture"), "test");
  ASSERT_EQ(f->tensors().size(), ts.size());
  const uint8_t* base = f->tensors()[0].data - f->data_offset() - f->tensors()[0].offset;
  check_tensors(*f, ts, alignment, base);

  // A moved-from file keeps its views valid in the new owner.
  gguf_file moved = std::move(*f);
  EXPECT_EQ(std::vector<uint8_t>(moved.tensors()[0].data,
                                 moved.tensors()[0].data + moved.tensors()[0].n_bytes),
            ts[0].bytes);

  // Only the final file is left in the directory.
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "model.gguf");
  }
  EXPECT_EQ(entries, 1u);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(alignments, roundtrip, ::testing::Values(32u, 64u, 8u, 4096u));

TEST(gguf_writer, empty_file_round_trips) {
  gguf_writer w;
  auto bytes = w.write_to_memory();
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->size(), 32u);  // the header, padded to the alignment where the data would start
  auto f = gguf_file::parse(*bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_TRUE(f->metadata().empty());
  EXPECT_TRUE(f->tensors().empty());
}

TEST(gguf_writer, set_replaces_in_place) {
  gguf_writer w;
  w.set_u32("a", 1);
  w.set_u32("b", 2);
  w.set_string("a", "x");
  auto f = gguf_file::parse(*w.write_to_memory());
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].key, "a");
  EXPECT_EQ(*f->get_string("a"), "x");
}

TEST(gguf_writer, explicit_alignment_key_must_agree) {
  gguf_writer w(64);
  w.set_u32("general.alignment", 64);
  auto bytes = w.write_to_memory();
  ASSERT_TRUE(bytes.ok()) << bytes.message();
  auto f = gguf_file::parse(*bytes);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->metadata().size(), 1u);  // not written twice
  EXPECT_EQ(f->alignment(), 64u);

  gguf_writer bad(32);
  bad.set_u32("general.alignment", 64);
  auto r = bad.write_to_memory();
  ASSERT_FALSE(r.ok());
  EXPECT_HAS(r.message(), "general.alignment");
}

TEST(gguf_writer, rejects_bad_tensors) {
  gguf_writer w;
  ASSERT_TRUE(w.add_tensor("t", ggml_type::f32, {2}, std::vector<uint8_t>(8)).ok());
  status s = w.add_tensor("t", ggml_type::f32, {2}, std::vector<uint8_t>(8));
  EXPECT_HAS(s.message(), "duplicate");
  s = w.add_tensor("q", ggml_type::q4_0, {33}, [](std::span<uint8_t>) -> status { return {}; });
  EXPECT_HAS(s.message(), "not a multiple of the Q4_0 block size 32");
  s = w.add_tensor("z", ggml_type::f32, {2, 0}, std::vector<uint8_t>());
  EXPECT_HAS(s.message(), "dims[1] is 0");
  s = w.add_tensor("d", ggml_type::f32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4));
  EXPECT_HAS(s.message(), "5 dimensions");
  s = w.add_tensor("e", ggml_type::f32, {}, std::vector<uint8_t>(4));
  EXPECT_HAS(s.message(), "0 dimensions");
  s = w.add_tensor("s", ggml_type::f32, {3}, std::vector<uint8_t>(8));
  EXPECT_HAS(s.message(), "8 bytes given");
  auto f = gguf_file::parse(*w.write_to_memory());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->tensors().size(), 1u);  // only the good one was added
}

TEST(gguf_writer, rejects_bad_alignment_and_mixed_arrays) {
  auto r = gguf_writer(48).write_to_memory();
  ASSERT_FALSE(r.ok());
  EXPECT_HAS(r.message(), "alignment 48");
  EXPECT_FALSE(gguf_writer(0).write_to_memory().ok());

  gguf_writer w;
  w.set("mixed", arr(gguf_type::u8, {gguf_value{uint8_t{1}}, gguf_value{int32_t{2}}}));
  r = w.write_to_memory();
  ASSERT_FALSE(r.ok());
  EXPECT_HAS(r.message(), "key 'mixed'[1] is i32 in an array of u8");

  // Nesting the reader would refuse (deeper than 4) and keys it would refuse are not written.
  gguf_value v = arr(gguf_type::u8, {});
  for (int level = 1; level < 4; ++level) v = arr(gguf_type::array, {v});
  gguf_writer four;
  four.set("deep", v);
  ASSERT_TRUE(four.write_to_memory().ok());
  four.set("deeper", arr(gguf_type::array, {v}));
  r = four.write_to_memory();
  ASSERT_FALSE(r.ok());
  EXPECT_HAS(r.message(), "key 'deeper'[0][0][0][0]: arrays nest deeper than 4");
  gguf_writer bad_key;
  bad_key.set_u32("a\xff", 1);
  EXPECT_HAS(bad_key.write_to_memory().message(), "not valid UTF-8");
  EXPECT_HAS(
      gguf_writer().add_tensor("\xff", ggml_type::f32, {1}, std::vector<uint8_t>(4)).message(),
      "not valid UTF-8");
}

TEST(gguf_writer, failed_producer_leaves_no_file) {
  const fs::path dir =
      fs::temp_directory_path() / ("tandem_gguf_fail_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "out.gguf").string();
  gguf_writer w;
  ASSERT_TRUE(w.add_tensor("ok", ggml_type::f32, {4}, std::vector<uint8_t>(16, 1)).ok());
  ASSERT_TRUE(w.add_tensor("bad", ggml_type::f32, {4}, [](std::span<uint8_t>) -> status {
                 return make_error("quantizer exploded");
               }).ok());
  status st = w.write(path);
  ASSERT_FALSE(st.ok());
  EXPECT_HAS(st.message(), path);
  EXPECT_HAS(st.message(), "tensor 'bad'");
  EXPECT_HAS(st.message(), "quantizer exploded");
  EXPECT_TRUE(fs::is_empty(dir));  // neither the final name nor the temporary file

  // An existing file under the final name survives a failed write untouched.
  { std::ofstream(path) << "old"; }
  ASSERT_FALSE(w.write(path).ok());
  std::ifstream in(path);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "old");
  fs::remove_all(dir);
}

TEST(gguf_writer, io_errors_name_the_path) {
  const std::string path = "/nonexistent-dir-tandem/x/model.gguf";
  status st = gguf_writer().write(path);
  ASSERT_FALSE(st.ok());
  EXPECT_HAS(st.message(), path);
  EXPECT_HAS(st.message(), "No such file or directory");
}

TEST(gguf_writer, write_failure_midway_leaves_no_file) {
  // A file size limit makes write() fail with EFBIG part way through the tensor data.
  const fs::path dir =
      fs::temp_directory_path() / ("tandem_gguf_efbig_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "big.gguf").string();
  gguf_writer w;
  ASSERT_TRUE(
      w.add_tensor("big", ggml_type::f32, {1 << 20}, std::vector<uint8_t>(4 << 20, 7)).ok());
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  status st = w.write(path);
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(st.ok());
  EXPECT_HAS(st.message(), path);
  EXPECT_HAS(st.message(), "write failed");
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

// ---- typed getters ----

gguf_file getter_file() {
  gguf_writer w;
  w.set("i32.neg", gguf_value{int32_t{-3}});
  w.set("i32.pos", gguf_value{int32_t{28}});
  w.set("u8", gguf_value{uint8_t{7}});
  w.set("u64.big", gguf_value{std::numeric_limits<uint64_t>::max()});
  w.set("i64.min", gguf_value{std::numeric_limits<int64_t>::min()});
  w.set_f32("f32", 0.25f);
  w.set("f64", gguf_value{0.5});
  w.set_bool("b", true);
  w.set_string("s", "text");
  w.set("ints", gguf_i32_array({1, 2}));
  w.set("u64s", arr(gguf_type::u64, {gguf_value{std::numeric_limits<uint64_t>::max()}}));
  w.set("strs", gguf_string_array({"x"}));
  w.set("f64s", arr(gguf_type::f64, {gguf_value{1.0}}));
  static std::vector<uint8_t> bytes;
  bytes = *w.write_to_memory();
  return gguf_file::parse(bytes).value();
}

TEST(gguf_getters, values) {
  const gguf_file f = getter_file();
  EXPECT_EQ(*f.get_uint("i32.pos"), 28u);
  EXPECT_EQ(*f.get_uint("u8"), 7u);
  EXPECT_EQ(*f.get_uint("u64.big"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f.get_int("i32.neg"), -3);
  EXPECT_EQ(*f.get_int("i64.min"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f.get_int("u8"), 7);
  EXPECT_EQ(*f.get_float("f32"), 0.25);
  EXPECT_EQ(*f.get_float("f64"), 0.5);
  EXPECT_EQ(*f.get_bool("b"), true);
  EXPECT_EQ(*f.get_string("s"), "text");
  EXPECT_EQ(*f.get_int_array("ints"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(*f.get_string_array("strs"), (std::vector<std::string>{"x"}));
  EXPECT_EQ(*f.get_float_array("f64s"), (std::vector<double>{1.0}));
}

TEST(gguf_getters, mismatch_errors) {
  const gguf_file f = getter_file();
  EXPECT_EQ(f.get_uint("i32.neg").message(),
            "gguf: key 'i32.neg' is i32 with value -3, expected an unsigned integer");
  EXPECT_EQ(f.get_uint("f32").message(), "gguf: key 'f32' is f32, expected an unsigned integer");
  EXPECT_EQ(f.get_uint("missing.key").message(), "gguf: key 'missing.key' is missing");
  EXPECT_HAS(f.get_int("u64.big").message(),
             "key 'u64.big' is u64 with value 18446744073709551615");
  EXPECT_EQ(f.get_int("s").message(), "gguf: key 's' is string, expected a signed 64-bit integer");
  EXPECT_EQ(f.get_float("u8").message(), "gguf: key 'u8' is u8, expected f32 or f64");
  EXPECT_EQ(f.get_bool("u8").message(), "gguf: key 'u8' is u8, expected bool");
  EXPECT_EQ(f.get_string("ints").message(), "gguf: key 'ints' is array of i32, expected string");
  EXPECT_EQ(f.get_string_array("ints").message(),
            "gguf: key 'ints' is array of i32, expected an array of string");
  EXPECT_EQ(f.get_int_array("strs").message(),
            "gguf: key 'strs' is array of string, expected an array of integers");
  EXPECT_EQ(f.get_int_array("s").message(),
            "gguf: key 's' is string, expected an array of integers");
  EXPECT_HAS(f.get_int_array("u64s").message(),
             "key 'u64s'[0] is u64 with value 18446744073709551615");
  EXPECT_EQ(f.get_float_array("ints").message(),
            "gguf: key 'ints' is array of i32, expected an array of f32 or f64");
  EXPECT_EQ(f.get_bool("nope").message(), "gguf: key 'nope' is missing");
}

}  // namespace
}  // namespace tandem
