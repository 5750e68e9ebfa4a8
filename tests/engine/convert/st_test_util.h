// Test helpers: build safetensors files byte by byte (valid ones through make_safetensors, broken
// ones from a raw header) and manage a scratch directory per test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace tandem::test {

struct st_entry {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

inline void put_u64_le(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Header text as given, then the data bytes.
inline std::vector<uint8_t> raw_safetensors(const std::string& header,
                                            const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  put_u64_le(out, header.size());
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// A valid file: tensors laid out back to back in the given order, header padded with spaces to a
// multiple of 8 as the reference writer does.
inline std::vector<uint8_t> make_safetensors(const std::vector<st_entry>& entries,
                                             const nlohmann::json& metadata = nullptr) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.is_null()) h["__metadata__"] = metadata;
  std::vector<uint8_t> data;
  for (const auto& e : entries) {
    h[e.name] = {{"dtype", e.dtype},
                 {"shape", e.shape},
                 {"data_offsets", {data.size(), data.size() + e.bytes.size()}}};
    data.insert(data.end(), e.bytes.begin(), e.bytes.end());
  }
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';
  return raw_safetensors(text, data);
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

inline std::vector<float> random_floats(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline void write_file(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// A fresh directory per test, removed afterwards.
class scratch_dir_test : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("tandem-convert-" + std::to_string(::getpid()) + "-" + info->test_suite_name() + "-" +
            info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

}  // namespace tandem::test
