// tandem-model tokenize / detokenize: the model's tokenizer from its GGUF metadata, on stdin.
#include "tokenize_cmd.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>

#include "cli_common.h"
#include "gguf/gguf_reader.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

namespace {

struct tokenize_args {
  std::string model;
  bool special = false;
  bool bos = false;
  bool skip_special = false;
};

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

tokenizer load(const std::string& path) {
  auto file = gguf_file::open(path);
  if (!file) fail(file.message());
  auto tok = tokenizer::from_gguf(*file);
  if (!tok) fail(path + ": " + tok.message());
  return std::move(*tok);
}

void run_tokenize(const tokenize_args& a) {
  const tokenizer tok = load(a.model);
  auto ids = tok.encode(read_stdin(), {.parse_special = a.special, .add_bos = a.bos});
  if (!ids) fail("stdin: " + ids.message());
  std::cout << nlohmann::json(*ids).dump() << "\n";
}

void run_detokenize(const tokenize_args& a) {
  const tokenizer tok = load(a.model);
  const auto input = nlohmann::json::parse(read_stdin(), nullptr, false);
  if (input.is_discarded() || !input.is_array()) fail("stdin: expected a JSON array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(input.size());
  for (const auto& v : input) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 0x7FFFFFFF) {
      fail("stdin: not a token id: " + v.dump());
    }
    ids.push_back(v.get<int32_t>());
  }
  auto text = tok.decode(ids, a.skip_special);
  if (!text) fail(text.message());
  std::fwrite(text->data(), 1, text->size(), stdout);
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
  auto args = std::make_shared<tokenize_args>();
  CLI::App* tok = app.add_subcommand("tokenize", "Tokenize stdin with a GGUF model's tokenizer; "
                                                  "prints a JSON array of ids");
  tok->add_option("--model,-m", args->model, "GGUF file")->required()->check(CLI::ExistingFile);
  tok->add_flag("--special", args->special,
                "Parse control tokens written in the text (<|im_end|>, ...); off by default");
  tok->add_flag("--bos", args->bos, "Prepend the BOS token when the vocabulary has one");
  tok->callback([args] { run_tokenize(*args); });

  CLI::App* detok = app.add_subcommand("detokenize", "Turn a JSON array of ids on stdin into text");
  detok->add_option("--model,-m", args->model, "GGUF file")->required()->check(CLI::ExistingFile);
  detok->add_flag("--skip-special", args->skip_special, "Leave control tokens out of the text");
  detok->callback([args] { run_detokenize(*args); });
}

}  // namespace tandem
