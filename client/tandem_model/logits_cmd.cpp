// `tandem-model logits --model F --tokens 1,2,3 [--out f.json]`: one batched forward pass over the
// given ids on the CPU reference backend, dumping every position's logits as JSON. The reference
// check against Hugging Face transformers reads this output.
#include "logits_cmd.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "open_instance.h"

namespace tandem {
namespace {

struct logits_options {
  std::string model;
  std::string tokens;
  std::string out;
  std::string kv_type = "f32";
  unsigned threads = 0;
  open_args dev;  // --gpu, --gpus, --ratios, --split
};

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > 0x7fffffff) throw std::out_of_range("id");
      ids.push_back(int32_t(v));
    } catch (const std::exception&) {
      fail("--tokens: '" + item + "' is not a token id");
    }
  }
  if (ids.empty()) fail("--tokens is empty");
  return ids;
}

void run_logits(const logits_options& o) {
  const auto ids = parse_ids(o.tokens);
  // One forward over all the tokens: the plan counts a pass of that many.
  auto inst = open_instance({o.model, o.kv_type, uint32_t(ids.size()), o.threads, o.dev.gpu, o.dev.gpus, o.dev.ratios,
                             o.dev.split, uint32_t(ids.size())});
  batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], 0, int32_t(i), true);
  std::vector<float> logits;
  status s = inst->be().forward(b, inst->cache(), logits);
  if (!s) fail(s.message());
  const size_t V = inst->be().n_vocab();
  nlohmann::ordered_json j;
  j["model"] = o.model;
  j["n_vocab"] = V;
  j["tokens"] = ids;
  j["logits"] = nlohmann::json::array();
  for (size_t t = 0; t < ids.size(); ++t)
    j["logits"].push_back(std::vector<float>(logits.begin() + t * V, logits.begin() + (t + 1) * V));
  const std::string text = j.dump();
  if (o.out.empty() || o.out == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return;
  }
  std::ofstream f(o.out, std::ios::binary);
  f << text << '\n';
  if (!f) fail("cannot write " + o.out);
}

}  // namespace

void add_logits_command(CLI::App& app) {
  auto o = std::make_shared<logits_options>();
  auto* cmd = app.add_subcommand("logits", "Dump the logits of every position for given token ids");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("--tokens", o->tokens, "Comma-separated token ids, e.g. 1,2,3")->required();
  cmd->add_option("-o,--out", o->out, "Output JSON file (default stdout)");
  cmd->add_option("--kv-type", o->kv_type, "KV cache type: f32 (default), f16, q8_0");
  cmd->add_option("-t,--threads", o->threads, "CPU threads (default all cores)");
  add_device_options(cmd, o->dev);
  cmd->callback([o] { run_logits(*o); });
}

}  // namespace tandem
