// The seeds of a fuzz target's committed corpus, for the replay tests: each replayed through the
// target's entry point (which traps on a failure), and the valid_* / bad_* naming checked.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace tandem::test {

using fuzz_entry = int (*)(const std::uint8_t*, std::size_t);

// (file name, bytes) of every file in dir, after running each through `entry`.
inline std::vector<std::pair<std::string, std::string>> replay_corpus(const std::filesystem::path& dir,
                                                                      fuzz_entry entry) {
  std::vector<std::pair<std::string, std::string>> out;
  EXPECT_TRUE(std::filesystem::is_directory(dir)) << dir;
  if (!std::filesystem::is_directory(dir)) return out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string name = e.path().filename().string();
    SCOPED_TRACE(name);
    EXPECT_EQ(entry(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), 0);
    out.emplace_back(name, std::move(bytes));
  }
  return out;
}

// The naming of seeds that a reader takes or refuses: valid_* must parse, bad_* must not.
struct seed_counts {
  int valid = 0, bad = 0, other = 0;
  void check(const std::string& name, bool parsed, const std::string& why = {}) {
    if (name.rfind("valid_", 0) == 0) {
      EXPECT_TRUE(parsed) << name << ": " << why;
      ++valid;
    } else if (name.rfind("bad_", 0) == 0) {
      EXPECT_FALSE(parsed) << name;
      ++bad;
    } else {
      ++other;
    }
  }
};

}  // namespace tandem::test
