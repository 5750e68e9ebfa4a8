// Opens a model for the generation, perplexity and logits commands.
#include "open_instance.h"

#include "cli_common.h"
#include "quant/ggml_type.h"

namespace tandem {

std::unique_ptr<model_instance> open_instance(const open_args& a) {
  auto kv = type_from_name(a.kv_type);
  if (!kv) fail("unknown --kv-type '" + a.kv_type + "'");
  instance_options io;
  io.n_threads = a.threads;
  io.gpu = a.gpu;
  io.cache.n_ctx = a.n_ctx;
  io.cache.type = *kv;
  auto inst = model_instance::open(a.model, io);
  if (!inst) fail(inst.message());
  return std::move(*inst);
}

}  // namespace tandem
