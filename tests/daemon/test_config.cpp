// tandemd's configuration: keys from the TOML file, flags over the file, and errors for bad files.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "config/daemon_config.h"

namespace tandem::daemon {
namespace {

struct config_file {
  std::string path = testing::TempDir() + "tandemd_test_" + std::to_string(::getpid()) + ".toml";
  explicit config_file(const std::string& text) { std::ofstream(path) << text; }
  ~config_file() { std::remove(path.c_str()); }
};

parse_outcome parse(std::vector<std::string> args) {
  args.insert(args.begin(), "tandemd");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_config(static_cast<int>(argv.size()), argv.data());
}

TEST(daemon_config, file_keys_and_flags_over_them) {
  config_file f("gpu = 1\nthreads = 3\ncontext = 2048\n");
  auto r = parse({"--config", f.path, "--threads", "5"});
  ASSERT_FALSE(r.exit_now) << r.output;
  EXPECT_EQ(r.config.gpu, 1);
  EXPECT_EQ(r.config.threads, 5u);
  EXPECT_EQ(r.config.context, 2048u);
}

TEST(daemon_config, gpu_defaults_to_the_cpu_backend) {
  auto r = parse({"--config", "/dev/null"});
  ASSERT_FALSE(r.exit_now) << r.output;
  EXPECT_EQ(r.config.gpu, -1);
}

TEST(daemon_config, misspelt_key_is_an_error) {
  config_file f("thread = 3\n");
  auto r = parse({"--config", f.path});
  EXPECT_TRUE(r.exit_now);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("thread"), std::string::npos) << r.output;
}

TEST(daemon_config, out_of_range_gpu_is_an_error) {
  auto r = parse({"--config", "/dev/null", "--gpu", "-2"});
  EXPECT_TRUE(r.exit_now);
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace tandem::daemon
