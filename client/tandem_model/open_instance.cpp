// Opens a model for the generation, perplexity and logits commands.
#include "open_instance.h"

#include <algorithm>
#include <cstdio>

#include "cli_common.h"
#include "quant/ggml_type.h"

namespace tandem {

std::unique_ptr<model_instance> open_instance(const open_args& a) {
  auto kv = type_from_name(a.kv_type);
  if (!kv) fail("unknown --kv-type '" + a.kv_type + "'");
  instance_options io;
  io.n_threads = a.threads;
  io.gpu = a.gpu;
  io.gpus = a.gpus;
  io.ratios = a.ratios;
  io.split = a.split;
  io.cache.n_ctx = a.n_ctx;
  io.cache.type = *kv;
  io.n_batch = std::max<uint32_t>(1, a.n_batch);
  auto inst = model_instance::open(a.model, io);
  if (!inst) fail(inst.message());
  if (const std::string& note = (*inst)->placement_note(); !note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
  return std::move(*inst);
}

void add_device_options(CLI::App* cmd, open_args& a) {
  cmd->add_option("--gpu", a.gpu, "Run on CUDA device N (default: the CPU reference backend)");
  cmd->add_option("--gpus", a.gpus,
                  "Split the model over several CUDA devices, e.g. 0,1 or 0=16GiB,1=32GiB (caps); "
                  "refused before allocating when the memory plan does not fit (hybrid and MoE models, "
                  "which cannot be split yet: the one listed device they fit best)");
  cmd->add_option("--ratios", a.ratios, "With --gpus: each device's share in these proportions, e.g. 1,1.75 "
                                        "(default: the memory plan's balance)");
  cmd->add_option("--split", a.split, "With --gpus: layer (default; contiguous layer ranges) or tensor (every "
                                      "layer cut by KV heads and FFN columns, partial sums exchanged)");
}

}  // namespace tandem
