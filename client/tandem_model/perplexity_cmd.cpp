// `tandem-model perplexity --model F --file TEXT [--ctx N]`: chunked perplexity as llama.cpp's
// perplexity tool computes it (see runtime/perplexity.h), printing the same running estimates.
#include "perplexity_cmd.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>

#include "cli_common.h"
#include "open_instance.h"
#include "runtime/perplexity.h"
#include "tokenizer/tokenizer.h"

namespace tandem {
namespace {

struct perplexity_options {
  std::string model;
  std::string file;
  uint32_t ctx = 512;
  uint32_t batch = 512;
  int32_t chunks = -1;
  std::string kv_type = "f16";
  unsigned threads = 0;
  open_args dev;  // --gpu, --gpus, --ratios, --split
};

void run_perplexity(const perplexity_options& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in) fail("cannot read " + o.file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto inst = open_instance({o.model, o.kv_type, o.ctx, o.threads, o.dev.gpu, o.dev.gpus, o.dev.ratios, o.dev.split,
                             std::min(o.batch, o.ctx)});
  auto tok = tokenizer::from_gguf(inst->file());
  if (!tok) fail(tok.message());
  // As llama.cpp: the whole text is tokenized once, with BOS when the model adds one.
  auto ids = tok->encode(text, {.parse_special = false, .add_bos = tok->wants_bos(), .plain = {}});
  if (!ids) fail(ids.message());
  perplexity_params p;
  p.n_ctx = o.ctx;
  p.n_batch = o.batch;
  p.max_chunks = o.chunks;
  p.bos_id = tok->wants_bos() ? tok->vocab().bos_id : -1;
  std::fprintf(stderr, "perplexity: %zu tokens, n_ctx=%u, %zu chunks, scoring %u tokens each\n",
               ids->size(), o.ctx, ids->size() / o.ctx, o.ctx - 1 - o.ctx / 2);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = perplexity(inst->be(), inst->cache(), *ids, p, [](size_t i, size_t, double ppl) {
    std::printf("[%zu]%.4f,", i, ppl);
    std::fflush(stdout);
  });
  if (!r) fail(r.message());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r->ppl, r->ppl_error);
  std::fprintf(stderr, "perplexity: %zu chunks, %zu tokens scored, %.1f s (%.1f tokens/s)\n",
               r->n_chunks, r->n_scored, secs, double(r->n_chunks) * o.ctx / secs);
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto o = std::make_shared<perplexity_options>();
  auto* cmd = app.add_subcommand("perplexity", "Chunked perplexity of a text file (llama.cpp's method)");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("-f,--file", o->file, "Text file")->required();
  cmd->add_option("-c,--ctx", o->ctx, "Chunk length in tokens (default 512)")->check(CLI::Range(4u, 1u << 20));
  cmd->add_option("-b,--batch", o->batch, "Tokens per forward pass (default 512)")->check(CLI::Range(1u, 1u << 20));
  cmd->add_option("--chunks", o->chunks, "Score at most this many chunks (default all)");
  cmd->add_option("--kv-type", o->kv_type, "KV cache type: f16 (default), q8_0, f32");
  cmd->add_option("-t,--threads", o->threads, "CPU threads (default all cores)");
  add_device_options(cmd, o->dev);
  cmd->callback([o] { run_perplexity(*o); });
}

}  // namespace tandem
