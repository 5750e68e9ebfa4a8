// Test helpers for tandemd's configuration: a temporary config file and parse_config over argv.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "config/daemon_config.h"

namespace tandem::daemon {

struct config_file {
  inline static int count = 0;
  std::string path = testing::TempDir() + "tandemd_test_" + std::to_string(::getpid()) + "_" +
                     std::to_string(count++) + ".toml";
  explicit config_file(const std::string& text) { std::ofstream(path) << text; }
  ~config_file() { std::remove(path.c_str()); }
};

inline parse_outcome parse(std::vector<std::string> args) {
  args.insert(args.begin(), "tandemd");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_config(static_cast<int>(argv.size()), argv.data());
}

}  // namespace tandem::daemon
