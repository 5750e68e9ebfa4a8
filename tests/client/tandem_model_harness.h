// Running the built tandem-model binary from a test: a temporary directory per test, the exit
// code and both output streams of a command line, and a model made in that directory.
// TANDEM_MODEL_BIN (the binary's path) comes from the test's CMake target.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace tandem::test {

struct run_result {
  int code = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class tandem_model_test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tandem-model-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  run_result run(const std::string& args) const {
    const std::filesystem::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string cmd =
        std::string(TANDEM_MODEL_BIN) + " " + args + " >" + out.string() + " 2>" + err.string();
    const int st = std::system(cmd.c_str());
    run_result r;
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  // Makes a model and fails the test when that does not work.
  std::string make(const std::string& name, const std::string& args) const {
    const std::string p = path(name);
    const run_result r = run("make " + args + " -q -o " + p);
    EXPECT_EQ(r.code, 0) << r.err;
    return p;
  }

  std::filesystem::path dir_;
};

}  // namespace tandem::test
