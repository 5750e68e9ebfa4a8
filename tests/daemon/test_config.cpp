// tandemd's configuration: keys from the TOML file, flags over the file, and errors for bad files.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/daemon_config.h"
#include "config_files.h"
#include "registry/engine_model.h"

namespace tandem::daemon {
namespace {

TEST(daemon_config, file_keys_and_flags_over_them) {
  config_file f("gpu = 1\nthreads = 3\ncontext = 2048\n");
  auto r = parse({"--config", f.path, "--threads", "5"});
  ASSERT_FALSE(r.exit_now) << r.output;
  EXPECT_EQ(r.config.gpu, 1);
  EXPECT_EQ(r.config.threads, 5u);
  EXPECT_EQ(r.config.context, 2048u);
}

TEST(daemon_config, gpu_defaults_to_auto) {
  auto r = parse({"--config", "/dev/null"});
  ASSERT_FALSE(r.exit_now) << r.output;
  EXPECT_EQ(r.config.gpu, k_gpu_auto);
  config_file f("gpu = \"auto\"\n");
  auto file = parse({"--config", f.path});
  ASSERT_FALSE(file.exit_now) << file.output;
  EXPECT_EQ(file.config.gpu, k_gpu_auto);
  auto cpu = parse({"--config", "/dev/null", "--gpu", "-1"});
  ASSERT_FALSE(cpu.exit_now) << cpu.output;
  EXPECT_EQ(cpu.config.gpu, -1);
}

// auto: every GPU present, the CPU only when there is none; ids and gpus are left as given.
TEST(daemon_config, gpu_auto_takes_every_device_present) {
  const auto resolved = [](int devices, daemon_config c = {}) {
    const std::string said = resolve_gpu_auto(c, devices);
    EXPECT_FALSE(said.empty());
    return c;
  };
  EXPECT_EQ(resolved(0).gpu, -1);
  EXPECT_TRUE(resolved(0).gpus.empty());
  EXPECT_EQ(resolved(1).gpu, 0);
  EXPECT_TRUE(resolved(1).gpus.empty());
  EXPECT_EQ(resolved(3).gpu, -1);
  EXPECT_EQ(resolved(3).gpus, "0,1,2");
  daemon_config listed;
  listed.gpus = "1=8GiB";
  EXPECT_EQ(resolved(2, listed).gpus, "1=8GiB");
  EXPECT_EQ(resolved(2, listed).gpu, -1);
  daemon_config named;
  named.gpu = 3;  // a named device never falls back: resolve leaves it (gpu-wait decides)
  EXPECT_EQ(resolve_gpu_auto(named, 0), "");
  EXPECT_EQ(named.gpu, 3);
}

TEST(daemon_config, misspelt_key_is_an_error) {
  config_file f("# comment\ncontext = 2048\nthread = 3\n");
  auto r = parse({"--config", f.path});
  EXPECT_TRUE(r.exit_now);
  EXPECT_NE(r.exit_code, 0);
  // The file and line, the key, and the option it probably meant.
  EXPECT_NE(r.output.find(f.path + ":3: unknown key 'thread'; did you mean 'threads'?"), std::string::npos)
      << r.output;
}

TEST(daemon_config, out_of_range_gpu_is_an_error) {
  for (const char* bad : {"-2", "1024", "two", "0x1", ""}) {
    auto r = parse({"--config", "/dev/null", "--gpu", bad});
    EXPECT_TRUE(r.exit_now) << bad;
    EXPECT_EQ(r.exit_code, exit_usage) << bad;
    EXPECT_NE(r.output.find("expected auto, -1"), std::string::npos) << bad << ": " << r.output;
  }
}

// tandemd(8): every command-line or file error exits 2, --help and --version exit 0.
TEST(daemon_config, every_usage_error_exits_2) {
  config_file bad_value("queue-depth = \"many\"\n");
  config_file unknown_key("thread = 3\n");
  const std::vector<std::vector<std::string>> cases = {
      {"--no-such-flag"},
      {"--config", "/dev/null", "--queue-depth", "0"},
      {"--config", "/dev/null", "--context"},
      {"--config", "/dev/null", "stray-positional"},
      {"--config", "/nonexistent/tandemd.toml"},
      {"--config", bad_value.path},
      {"--config", unknown_key.path},
      {"--config", "/dev/null", "--model", "no-equals-sign"},
      {"--config", "/dev/null", "--model", "a=/x.gguf", "--model", "a=/y.gguf"},
      {"--config", "/dev/null", "--memory-budget", "lots"},
      {"--config", "/dev/null", "--model-gpus", "big"},
      {"--config", "/dev/null", "--model-gpus", "big="},
      {"--config", "/dev/null", "--model-gpus", "bad name=0,1"},
      {"--config", "/dev/null", "--model-ratios", "big=1,2", "--model-ratios", "big=1,3"},
      {"--config", "/dev/null", "--gpus", "0,x"},
      {"--config", "/dev/null", "--gpus", "v100-16gb,v100-32gb"},  // the planner's GPU models
      {"--config", "/dev/null", "--gpus", "16GiB"},
      {"--config", "/dev/null", "--model-gpus", "big=h200"},
  };
  for (const auto& args : cases) {
    auto r = parse(args);
    EXPECT_TRUE(r.exit_now) << args.back();
    EXPECT_EQ(r.exit_code, exit_usage) << args.back() << ": " << r.output;
    EXPECT_FALSE(r.output.empty()) << args.back();
  }
  for (const char* flag : {"--help", "--version"}) {
    auto r = parse({flag});
    EXPECT_TRUE(r.exit_now);
    EXPECT_EQ(r.exit_code, exit_ok) << flag;
    EXPECT_FALSE(r.output.empty()) << flag;
  }
}

// tandemd serves on CUDA devices: a GPU model (what tandem-model plan --devices takes) in gpus,
// global or in a table, is refused when the configuration is read, not when a load runs.
TEST(daemon_config, gpu_lists_name_cuda_devices) {
  auto r = parse({"--config", "/dev/null", "--gpus", "v100-16gb"});
  EXPECT_EQ(r.exit_code, exit_usage);
  EXPECT_NE(r.output.find("'v100-16gb' is not a CUDA device id"), std::string::npos) << r.output;
  config_file table("[model.big]\npath = \"/m.gguf\"\ngpus = \"0,v100-32gb\"\n");
  r = parse({"--config", table.path});
  EXPECT_EQ(r.exit_code, exit_usage);
  EXPECT_NE(r.output.find("'v100-32gb' is not a CUDA device id"), std::string::npos) << r.output;
  r = parse({"--config", "/dev/null", "--gpus", "0=16GiB,1=32GiB"});
  EXPECT_FALSE(r.exit_now) << r.output;
}

// The deprecated per-alias keys: NAME=VALUE where VALUE may itself hold '=' (caps), folded into
// the alias's settings; the loader applies them over gpus / ratios / split.
TEST(daemon_config, deprecated_per_model_devices) {
  config_file f("gpus = \"0,1\"\nmodel-gpus = [\"big=0=16GiB,1=32GiB\", \"small=1\"]\n"
                "model-ratios = [\"big=1,1.75\"]\nmodel-split = [\"big=tensor\"]\n");
  auto r = parse({"--config", f.path});
  ASSERT_FALSE(r.exit_now) << r.output;
  const auto& t = r.config.model_tables;
  EXPECT_EQ(t.at("big").gpus, "0=16GiB,1=32GiB");
  EXPECT_EQ(t.at("small").gpus, "1");
  EXPECT_EQ(t.at("big").ratios, "1,1.75");
  EXPECT_EQ(t.at("big").split, "tensor");
  EXPECT_FALSE(t.count("other"));
  EXPECT_EQ(r.config.notes.size(), 3u);  // one deprecation note per key
  engine_options eo;
  eo.gpus = r.config.gpus;
  eo.ratios = "2,1";
  eo.split = r.config.split;
  EXPECT_EQ(eo.with(t.at("big")).gpus, "0=16GiB,1=32GiB");
  EXPECT_EQ(eo.with(t.at("big")).ratios, "1,1.75");
  EXPECT_EQ(eo.with(t.at("small")).gpus, "1");
  EXPECT_EQ(eo.with(t.at("small")).ratios, "");  // its own devices: the plan's default ratios
  EXPECT_EQ(eo.with({}).gpus, "0,1");
  EXPECT_EQ(eo.with({}).ratios, "2,1");
  EXPECT_EQ(eo.with(t.at("big")).split, "tensor");
  EXPECT_EQ(eo.with({}).split, "layer");
}

TEST(daemon_config, bad_split_is_a_usage_error) {
  for (const char* text : {"split = \"rows\"\n", "model-split = [\"big=rows\"]\n"}) {
    config_file f(text);
    auto r = parse({"--config", f.path});
    EXPECT_TRUE(r.exit_now) << text;
    EXPECT_EQ(r.exit_code, exit_usage) << text;
  }
}

TEST(daemon_config, memory_budget_sizes) {
  config_file f("memory-budget = \"1.5GiB\"\n");
  auto r = parse({"--config", f.path});
  ASSERT_FALSE(r.exit_now) << r.output;
  EXPECT_EQ(r.config.memory_budget, 3ull << 29);
  EXPECT_EQ(parse({"--config", "/dev/null"}).config.memory_budget, 0u);  // unlimited by default
  EXPECT_EQ(parse_byte_size("512 MiB", "k").value(), 512ull << 20);
  EXPECT_EQ(parse_byte_size("8G", "k").value(), 8ull << 30);
  EXPECT_EQ(parse_byte_size("2GB", "k").value(), 2000000000u);
  EXPECT_EQ(parse_byte_size("12345", "k").value(), 12345u);
  EXPECT_EQ(parse_byte_size("3kib", "k").value(), 3072u);
  for (const char* bad : {"", "GiB", "1.2.3G", "-1G", "5 parsecs", "1e30", "99999999999TiB"}) {
    auto b = parse_byte_size(bad, "memory-budget");
    EXPECT_FALSE(b.ok()) << bad;
    if (!b.ok()) {
      EXPECT_NE(b.message().find("memory-budget"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace tandem::daemon
