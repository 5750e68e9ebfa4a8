// `tandem-model import`: option parsing and reporting around engine/convert's import_hf_model.
// One uniform type for the 2-D weights; llama.cpp mixtures come from `quantize` afterwards.
#include "import_cmd.h"

#include <cstdio>
#include <memory>
#include <string>

#include "cli_common.h"
#include "convert/hf_import.h"
#include "progress.h"
#include "quant/quant.h"

namespace tandem {
namespace {

struct import_cli_options {
  std::string dir, output, type = "F16", name;
  unsigned threads = 0;
  bool no_tokenizer = false;
  bool quiet = false;
};

// The types the importer can write, for the help text and errors.
std::string type_list() {
  std::string s;
  for (uint32_t id = 0; id < 64; ++id) {
    const ggml_type_info* info = find_type_info(id);
    if (!info || !can_quantize(info->type) || !llama_file_type(info->type)) continue;
    s += (s.empty() ? "" : ", ") + std::string(info->name);
  }
  return s;
}

void run_import(const import_cli_options& o) {
  const auto type = type_from_name(o.type);
  if (!type || !can_quantize(*type) || !llama_file_type(*type))
    fail("--type " + o.type + " is not one the importer writes (" + type_list() +
         "; for mixtures such as Q4_K_M import F16 and run `tandem-model quantize`)");
  import_options opt;
  opt.type = *type;
  opt.name = o.name;
  opt.tokenizer = !o.no_tokenizer;
  opt.threads = o.threads;
  progress bar("import " + o.output, o.quiet);
  opt.progress = [&bar](size_t i, size_t n, uint64_t b, uint64_t total) {
    bar.update(i, n, b, total);
  };
  auto s = import_hf_model(o.dir, o.output, opt);
  if (!s) fail(s.message());
  bar.finish();
  if (o.quiet) return;
  for (const auto& note : s->notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  std::fprintf(stderr, "%s: %s, %u layers, %zu tensors, %s of weights as %s%s\n", o.output.c_str(),
               s->arch.c_str(), s->hp.n_layer, s->n_tensors, format_bytes(s->data_bytes).c_str(),
               std::string(type_name(*type)).c_str(),
               s->has_tokenizer ? ", with tokenizer" : ", no tokenizer");
}

}  // namespace

void add_import_command(CLI::App& app) {
  auto o = std::make_shared<import_cli_options>();
  auto* cmd = app.add_subcommand(
      "import",
      "Convert a Hugging Face model directory (config.json + *.safetensors; model types " +
          std::string("llama, qwen2, qwen3, qwen3_5_text, qwen3_5) to GGUF"));
  cmd->add_option("dir", o->dir, "Model directory, as transformers' save_pretrained writes it")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("-o,--output", o->output, "Output GGUF file")->required();
  cmd->add_option(
      "-t,--type", o->type,
      "Type of the 2-D weights (1-D tensors stay F32): " + type_list() + " (default F16)");
  cmd->add_option("--name", o->name, "general.name (default: the directory's name)");
  cmd->add_option("--threads", o->threads, "Conversion threads (default: all cores)");
  cmd->add_flag("--no-tokenizer", o->no_tokenizer, "Do not embed tokenizer.json even if present");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress or summary output");
  cmd->callback([o] { run_import(*o); });
}

}  // namespace tandem
