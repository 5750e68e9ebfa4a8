// Model instance construction: the CPU reference backend, or the CUDA backend where built.
#include "runtime/model_instance.h"

#include "backend/cpu/cpu_backend.h"
#ifdef TANDEM_HAVE_CUDA_BACKEND
#include "backend/cuda/cuda_backend.h"
#endif

namespace tandem {

result<std::unique_ptr<backend>> make_backend(const model_desc& desc, const instance_options& opt) {
  if (opt.gpu < 0) {
    auto be = make_cpu_backend(desc, {.n_threads = opt.n_threads});
    if (!be) return be.err();
    return std::unique_ptr<backend>(std::move(be.value()));
  }
#ifdef TANDEM_HAVE_CUDA_BACKEND
  int n = cuda_backend_device_count();
  if (opt.gpu >= n) return make_error("GPU ", opt.gpu, " requested, but ", n, " CUDA device(s) are usable");
  auto be = make_cuda_backend(desc, {.device = opt.gpu});
  if (!be) return be.err();
  return std::unique_ptr<backend>(std::move(be.value()));
#else
  return make_error("GPU ", opt.gpu, " requested, but this build has no CUDA backend");
#endif
}

result<std::unique_ptr<model_instance>> model_instance::open(const std::string& path,
                                                             instance_options opt) {
  auto m = load_model(path);
  if (!m) return m.err();
  auto inst = std::unique_ptr<model_instance>(new model_instance());
  inst->model_ = std::move(m.value());
  auto be = make_backend(inst->model_.desc, opt);
  if (!be) return be.err();
  inst->backend_ = std::move(be.value());
  if (opt.cache.n_ctx == 0) opt.cache.n_ctx = inst->model_.desc.hp.n_ctx_train;
  auto c = inst->backend_->make_cache(opt.cache);
  if (!c) return c.err();
  inst->cache_ = std::move(c.value());
  return inst;
}

}  // namespace tandem
