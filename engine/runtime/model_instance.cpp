// Model instance construction for the CPU backend.
#include "runtime/model_instance.h"

#include "backend/cpu/cpu_backend.h"

namespace tandem {

result<std::unique_ptr<model_instance>> model_instance::open_cpu(const std::string& path,
                                                                 instance_options opt) {
  auto m = load_model(path);
  if (!m) return m.err();
  auto inst = std::unique_ptr<model_instance>(new model_instance());
  inst->model_ = std::move(m.value());
  auto be = make_cpu_backend(inst->model_.desc, {.n_threads = opt.n_threads});
  if (!be) return be.err();
  inst->backend_ = std::move(be.value());
  if (opt.cache.n_ctx == 0) opt.cache.n_ctx = inst->model_.desc.hp.n_ctx_train;
  auto c = inst->backend_->make_cache(opt.cache);
  if (!c) return c.err();
  inst->cache_ = std::move(c.value());
  return inst;
}

}  // namespace tandem
