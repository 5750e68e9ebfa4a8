// The reader against damaged input: a valid file truncated at every offset, random byte flips,
// and open() on paths that are not GGUF files. Nothing may crash; truncation must be an error.
#include <gtest/gtest.h>
#include <cstdio>
#include <fcntl.h>
#include <cstring>
#include <cerrno>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

#define EXPECT_HAS(msg, part) \
  EXPECT_NE(std::string(msg).find(part), std::string::npos) << "message: " << (msg)

// A small valid file whose last tensor is a multiple of the alignment, so the file ends exactly
// where the last tensor's bytes end and every strict prefix is missing something.
std::vector<uint8_t> small_valid_file() {
  gguf_writer w;
  w.set_string("general.architecture", "qwen3");
  w.set_u32("qwen3.block_count", 2);
  w.set_f32("qwen3.rope.freq_base", 1e6f);
  w.set_bool("b", true);
  w.set("tokens", gguf_string_array({"a", "bc", ""}));
  w.set("types", gguf_i32_array({1, 2, 3}));
  w.set("nested",
        gguf_value{gguf_array{gguf_type::array, {gguf_f32_array({1.f}), gguf_f32_array({})}}});
  std::vector<uint8_t> q(18 * 2, 0x11);
  EXPECT_TRUE(w.add_tensor("blk.0.attn_q.weight", ggml_type::q4_0, {32, 2}, q).ok());
  EXPECT_TRUE(w.add_tensor("norm", ggml_type::f32, {3}, std::vector<uint8_t>(12, 0x22)).ok());
  EXPECT_TRUE(w.add_tensor("last", ggml_type::f32, {8}, std::vector<uint8_t>(32, 0x33)).ok());
  return *w.write_to_memory();
}

uint64_t touch_value(const gguf_value& v) {
  uint64_t h = static_cast<uint64_t>(v.type());
  if (const auto* a = std::get_if<gguf_array>(&v.v)) {
    for (const auto& item : a->items) h += touch_value(item);
  } else if (const auto* s = std::get_if<std::string>(&v.v)) {
    for (char c : *s) h += static_cast<unsigned char>(c);
  }
  return h;
}

// Reads everything a parsed file exposes, so a bad view would show up (under ASan, at once).
uint64_t touch(const gguf_file& f) {
  uint64_t h = f.data_offset() + f.alignment();
  for (const auto& kv : f.metadata()) {
    h += touch_value(kv.value) + kv.key.size();
    h += f.get_uint(kv.key).ok() + f.get_int(kv.key).ok() + f.get_float(kv.key).ok();
    h += f.get_string(kv.key).ok() + f.get_string_array(kv.key).ok() + f.get_int_array(kv.key).ok();
    h += f.get_float_array(kv.key).ok() + f.get_bool(kv.key).ok();
  }
  for (const auto& t : f.tensors()) {
    for (uint64_t i = 0; i < t.n_bytes; ++i) h += t.data[i];
    EXPECT_EQ(f.find_tensor(t.name), &t);
  }
  return h;
}

TEST(gguf_robustness, valid_file_parses) {
  const auto bytes = small_valid_file();
  auto f = gguf_file::parse(bytes);
  ASSERT_TRUE(f.ok()) << f.message();
  const gguf_tensor& last = f->tensors().back();
  EXPECT_EQ(f->data_offset() + last.offset + last.n_bytes, bytes.size());
  touch(*f);
}

TEST(gguf_robustness, truncated_at_every_offset) {
  const auto bytes = small_valid_file();
  for (size_t n = 0; n < bytes.size(); ++n) {
    // A fresh copy of exactly n bytes, so ASan would catch a read past the end.
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    auto f = gguf_file::parse(prefix);
    ASSERT_FALSE(f.ok()) << "a " << n << "-byte prefix of a " << bytes.size()
                         << "-byte file parsed";
    EXPECT_EQ(f.message().rfind("gguf: ", 0), 0u) << f.message();
    EXPECT_NE(f.message().find(" at offset "), std::string::npos) << f.message();
  }
}

TEST(gguf_robustness, random_byte_flips) {
  const auto bytes = small_valid_file();
  std::mt19937_64 rng(12345);
  size_t parsed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> copy = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % copy.size();
      if (rng() % 2) {
        copy[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
      } else {
        copy[at] = static_cast<uint8_t>(rng());
      }
    }
    auto f = gguf_file::parse(copy);
    if (f.ok()) {
      ++parsed;
      touch(*f);
    } else {
      EXPECT_EQ(f.message().rfind("gguf: ", 0), 0u) << f.message();
    }
  }
  // Flips in tensor data and string contents leave a valid file, so some must parse.
  EXPECT_GT(parsed, 0u);
}

class gguf_open : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tandem_gguf_open_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  fs::path dir_;
};

TEST_F(gguf_open, missing_path) {
  const std::string p = (dir_ / "does-not-exist.gguf").string();
  auto f = gguf_file::open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_HAS(f.message(), p);
  EXPECT_HAS(f.message(), "cannot open");
  EXPECT_HAS(f.message(), "No such file or directory");
}

TEST_F(gguf_open, directory) {
  auto f = gguf_file::open(dir_.string());
  ASSERT_FALSE(f.ok());
  EXPECT_HAS(f.message(), dir_.string());
  EXPECT_HAS(f.message(), "is a directory");
}

// A named pipe without a writer: refused at once (a blocking open would hang the loader).
TEST_F(gguf_open, fifo_is_refused_without_blocking) {
  const std::string p = (dir_ / "model.fifo").string();
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0) << std::strerror(errno);
  auto f = gguf_file::open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_HAS(f.message(), "not a regular file");
}

// A loaded file truncated or written in place is reported before its pages are read; one
// replaced by a rename is not (the mapping keeps the old file).
TEST_F(gguf_open, change_on_disk_is_detected) {
  const auto bytes = small_valid_file();
  const std::string p = write("changing.gguf", bytes);
  auto f = gguf_file::open(p);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_TRUE(f->check_unchanged().ok());
  const std::string other = write("other.gguf", bytes);
  ASSERT_EQ(::rename(other.c_str(), p.c_str()), 0);
  EXPECT_TRUE(f->check_unchanged().ok()) << "a rename over it is not a change of the mapped file";
  auto g = gguf_file::open(p);
  ASSERT_TRUE(g.ok()) << g.message();
  ASSERT_EQ(::truncate(p.c_str(), 64), 0);
  const auto st = g->check_unchanged();
  ASSERT_FALSE(st.ok());
  EXPECT_HAS(st.message(), "changed on disk");
  auto h = gguf_file::open(write("inplace.gguf", bytes));
  ASSERT_TRUE(h.ok());
  timespec later[2] = {{0, UTIME_OMIT}, {2000000000, 0}};  // written: a new mtime, same size
  ASSERT_EQ(::utimensat(AT_FDCWD, (dir_ / "inplace.gguf").c_str(), later, 0), 0);
  EXPECT_FALSE(h->check_unchanged().ok());
  EXPECT_TRUE(gguf_file::parse(bytes)->check_unchanged().ok());
}

TEST_F(gguf_open, empty_file) {
  const std::string p = write("empty.gguf", {});
  auto f = gguf_file::open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_HAS(f.message(), p);
  EXPECT_HAS(f.message(), "empty");
}

TEST_F(gguf_open, parse_errors_name_the_path) {
  const std::string p = write("junk.gguf", {'n', 'o', 't', ' ', 'g', 'g', 'u', 'f'});
  auto f = gguf_file::open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.message().rfind("gguf: " + p + ": magic at offset 0", 0), 0u) << f.message();
}

TEST_F(gguf_open, valid_file_maps) {
  const auto bytes = small_valid_file();
  const std::string p = write("ok.gguf", bytes);
  auto f = gguf_file::open(p);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->file_size(), bytes.size());
  EXPECT_EQ(*f->get_string("general.architecture"), "qwen3");
  EXPECT_EQ(*f->get_uint("qwen3.block_count"), 2u);
  const gguf_tensor* t = f->find_tensor("last");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->data[0], 0x33);
  EXPECT_EQ(t->data[31], 0x33);
}

}  // namespace
}  // namespace tandem
