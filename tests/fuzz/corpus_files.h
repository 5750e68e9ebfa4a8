// The seeds of a fuzz target's committed corpus, for the replay tests: (file name, bytes) of every
// file in a directory.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace tandem::test {

inline std::vector<std::pair<std::string, std::string>> corpus_files(const std::filesystem::path& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    out.emplace_back(e.path().filename().string(),
                     std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  }
  return out;
}

}  // namespace tandem::test
