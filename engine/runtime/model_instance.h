// A model instance: the mapped GGUF file, its bound description, a backend holding the weights
// and the KV cache that owns every sequence's state. What a tool or the scheduler drives.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/result.h"
#include "model/model_desc.h"

namespace tandem {

struct instance_options {
  int gpu = -1;            // -1: the CPU reference backend; N: the CUDA backend on device N
  unsigned n_threads = 0;  // CPU backend: 0 = all cores
  kv_cache_config cache;   // n_ctx 0: the model's training context
};

// The backend `opt` asks for (CPU, or CUDA device opt.gpu), holding desc's weights.
result<std::unique_ptr<backend>> make_backend(const model_desc& desc, const instance_options& opt);

class model_instance {
 public:
  // Opens the file, binds the model and builds the chosen backend and its cache. Asking for a
  // GPU in a build without the CUDA backend, or for a device that is not there, is an error.
  static result<std::unique_ptr<model_instance>> open(const std::string& path,
                                                      instance_options opt = {});

  const gguf_file& file() const { return *model_.file; }
  const model_desc& desc() const { return model_.desc; }
  backend& be() { return *backend_; }
  kv_cache& cache() { return *cache_; }

 private:
  loaded_model model_;
  std::unique_ptr<backend> backend_;
  std::unique_ptr<kv_cache> cache_;
};

}  // namespace tandem
