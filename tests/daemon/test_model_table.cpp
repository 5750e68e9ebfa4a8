// [model.NAME] tables in tandemd.toml: what they define, how they sit over the global keys and
// under the flags that name a model, and the errors (file, line, table, key) for bad ones.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/daemon_config.h"
#include "config_files.h"
#include "registry/engine_model.h"

namespace tandem::daemon {
namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(model_table, tables_define_models_and_their_settings) {
  config_file f(
      "model = [\"first=/m/first.gguf\"]\n"
      "context = 4096\n"
      "\n"
      "[model.big]  # the large one\n"
      "path = \"/m/big.gguf\"\n"
      "context = 8_192\n"
      "kv-type = 'q8_0'\n"
      "gpus = \"0=16GiB,1=32GiB\"\n"
      "split = \"tensor\"\n"
      "ratios = \"1,1.75\"\n"
      "keep-alive = 600.5\n"
      "parallel = 2\n"
      "\n"
      "[model.\"qwen3:8b\"]\n"
      "path = \"/m/q # not a comment.gguf\"\n"
      "gpus = 1\n");
  auto r = parse({"--config", f.path});
  ASSERT_FALSE(r.exit_now) << r.output;
  const auto& c = r.config;
  ASSERT_EQ(c.models.size(), 3u);  // the model list first, then the tables in file order
  EXPECT_EQ(c.models[0].alias, "first");
  EXPECT_EQ(c.models[1].alias, "big");
  EXPECT_EQ(c.models[1].path, "/m/big.gguf");
  EXPECT_EQ(c.models[2].alias, "qwen3:8b");
  EXPECT_EQ(c.models[2].path, "/m/q # not a comment.gguf");
  const auto& big = c.model_tables.at("big");
  EXPECT_EQ(big.context, 8192u);
  EXPECT_EQ(big.kv_type, "q8_0");
  EXPECT_EQ(big.gpus, "0=16GiB,1=32GiB");
  EXPECT_EQ(big.split, "tensor");
  EXPECT_EQ(big.ratios, "1,1.75");
  EXPECT_EQ(big.keep_alive_s, 600.5);
  EXPECT_EQ(big.parallel, 2u);
  EXPECT_EQ(c.model_tables.at("qwen3:8b").gpus, "1");
  EXPECT_FALSE(c.model_tables.at("qwen3:8b").context);
  EXPECT_FALSE(c.model_tables.count("first"));
  EXPECT_EQ(c.context, 4096u);  // the global key is untouched
}

// A table wins over the global keys, from the file or from flags; a load's own settings win over
// the table; --model names a file over a table's path.
TEST(model_table, precedence) {
  config_file f("context = 4096\nkv-type = \"f16\"\n[model.big]\npath = \"/m/big.gguf\"\ncontext = 1024\n");
  auto r = parse({"--config", f.path, "--context", "2048", "--kv-type", "f32", "--model", "big=/other.gguf"});
  ASSERT_FALSE(r.exit_now) << r.output;
  ASSERT_EQ(r.config.models.size(), 1u);
  EXPECT_EQ(r.config.models[0].path, "/other.gguf");
  engine_options eo;
  eo.context = r.config.context;
  eo.kv_type = r.config.kv_type;
  const auto& table = r.config.model_tables.at("big");
  EXPECT_EQ(eo.with(table).context, 1024u);
  EXPECT_EQ(eo.with(table).kv_type, "f32");  // not in the table: the global flag
  EXPECT_EQ(eo.with({}).context, 2048u);
  proto::model_settings request;
  request.context = 512;
  request.kv_type = "q8_0";
  EXPECT_EQ(eo.with(table.overridden_by(request)).context, 512u);
  EXPECT_EQ(eo.with(table.overridden_by(request)).kv_type, "q8_0");
}

// Settings for an alias that no model key or table path names wait for a load of that alias.
TEST(model_table, table_without_a_path_waits_for_a_load) {
  config_file f("[model.later]\ncontext = 512\n");
  auto r = parse({"--config", f.path});
  ASSERT_FALSE(r.exit_now) << r.output;
  EXPECT_TRUE(r.config.models.empty());
  EXPECT_EQ(r.config.model_tables.at("later").context, 512u);
  ASSERT_EQ(r.config.notes.size(), 1u);
  EXPECT_TRUE(has(r.config.notes[0], "[model.later] has no path")) << r.config.notes[0];
  // One that only adds settings to a listed model says nothing.
  config_file g("model = [\"m=/m.gguf\"]\n[model.m]\nkv-type = \"q8_0\"\n");
  auto s = parse({"--config", g.path});
  ASSERT_FALSE(s.exit_now) << s.output;
  EXPECT_EQ(s.config.models.size(), 1u);
  EXPECT_EQ(s.config.model_tables.at("m").kv_type, "q8_0");
  EXPECT_TRUE(s.config.notes.empty());
}

struct bad_case {
  std::string text;
  int line;
  std::vector<std::string> says;
};

// Each error names the file and line, the table and the key, and exits with the usage status.
TEST(model_table, errors_name_file_line_table_and_key) {
  const std::vector<bad_case> cases = {
      {"context = 4096\n[model.big]\npath = \"/m.gguf\"\ncontxt = 1\n", 4,
       {"[model.big]: unknown key 'contxt'", "did you mean 'context'?"}},
      {"[model.big]\nkv_type = \"q8_0\"\n", 2, {"unknown key 'kv_type'", "did you mean 'kv-type'?"}},
      {"[model.big]\ncontext = 8\n", 2, {"[model.big]: context = 8: must be 16 to"}},
      {"[model.big]\ncontext = \"big\"\n", 2, {"context = \"big\": expected an integer"}},
      {"[model.big]\ncontext = 10.5\n", 2, {"context = 10.5: expected an integer"}},
      {"[model.big]\nkv-type = \"q4\"\n", 2, {"kv-type = \"q4\": must be f16, q8_0 or f32"}},
      {"[model.big]\nsplit = \"rows\"\n", 2, {"split = \"rows\": must be layer or tensor"}},
      {"[model.big]\nparallel = 0\n", 2, {"parallel = 0: must be 1 to 256"}},
      {"[model.big]\nkeep-alive = -1\n", 2, {"keep-alive = -1: must be 0 to"}},
      {"[model.big]\ngpus = \"0,x\"\n", 2, {"[model.big]: gpus '0,x'"}},
      {"[model.big]\nratios = \"1,-2\"\n", 2, {"[model.big]: ratios '1,-2'"}},
      {"[model.big]\npath = \"\"\n", 2, {"path is empty"}},
      {"[model.big]\npath = /m.gguf\n", 2, {"path = /m.gguf: expected a string in quotes"}},
      {"[model.big]\npath = \"/m.gguf\n", 2, {"a string is not closed"}},
      {"[model.big]\ncontext = 64\ncontext = 128\n", 3, {"key 'context' given twice (first at line 2)"}},
      {"[model.a]\ncontext = 64\n\n[model.a]\n", 4, {"[model.a] is given twice (first at line 1)"}},
      {"[model]\npath = \"/m.gguf\"\n", 1, {"a model table needs its alias: [model.NAME]"}},
      {"[model.a.b]\n", 1, {"[model.NAME] takes one name"}},
      {"[[model.a]]\n", 1, {"arrays of tables"}},
      {"[model.\"a/b\"]\n", 1, {"'a/b' is not an alias"}},
      // TOML: keys after a table header belong to the table, also ones that look global.
      {"[model.a]\npath = \"/m.gguf\"\nthreads = 3\n", 3, {"[model.a]: unknown key 'threads'"}},
      {"model = [\"a=/x.gguf\"]\n[model.a]\npath = \"/y.gguf\"\n", 2, {"the model key names 'a' too"}},
      {"model-gpus = [\"a=0\"]\n[model.a]\ngpus = \"1\"\n", 2, {"gpus is also given by model-gpus"}},
  };
  for (const auto& c : cases) {
    config_file f(c.text);
    auto r = parse({"--config", f.path});
    EXPECT_TRUE(r.exit_now) << c.text;
    EXPECT_EQ(r.exit_code, exit_usage) << c.text;
    EXPECT_TRUE(has(r.output, f.path + ":" + std::to_string(c.line) + ": ")) << c.text << "\n" << r.output;
    for (const auto& s : c.says) EXPECT_TRUE(has(r.output, s)) << c.text << "\nwant: " << s << "\ngot: " << r.output;
  }
}

// Top-level keys still go through CLI11 as before: a misspelt one is still an error.
TEST(model_table, top_level_keys_are_unchanged) {
  config_file f("contxt = 1\n[model.a]\ncontext = 64\n");
  auto r = parse({"--config", f.path});
  EXPECT_TRUE(r.exit_now);
  EXPECT_EQ(r.exit_code, exit_usage);
  EXPECT_TRUE(has(r.output, f.path + ":1: unknown key 'contxt'")) << r.output;
}

}  // namespace
}  // namespace tandem::daemon
