// A model instance: the mapped GGUF file, its bound description, a backend holding the weights
// and the KV cache that owns every sequence's state. What a tool or the scheduler drives.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"
#include "model/model_desc.h"

namespace tandem {

struct instance_options {
  int gpu = -1;            // -1: the CPU reference backend; N: the CUDA backend on device N
  // Several GPUs, e.g. "0,1" or "0=16GiB,1=32GiB" (CUDA ids, optional caps): the model split by
  // layer ranges in that order, sized by the memory plan (engine/plan), which refuses a model
  // that does not fit before any GPU memory is allocated. Overrides gpu when set.
  std::string gpus;
  std::string ratios;      // layers per device in these proportions ("1,1.75"); empty: the plan's
  unsigned n_threads = 0;  // CPU backend: 0 = all cores
  kv_cache_config cache;   // n_ctx 0: the model's training context
};

// A layer split over CUDA devices as the memory plan lays it out (gpus and ratios as in
// instance_options, the cache it will hold): device ids and layers per device, or the plan's
// reasons for refusing. An error in a build without the CUDA backend.
struct layer_split {
  std::vector<int> devices;
  std::vector<uint32_t> layers;
};
result<layer_split> plan_layer_split(const model_desc& desc, const std::string& gpus, const std::string& ratios,
                                     const kv_cache_config& cache);

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
