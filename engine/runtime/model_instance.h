// A model instance: the mapped GGUF file, its bound description, a backend holding the weights
// and the KV cache that owns every sequence's state. What a tool or the scheduler drives.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/load_progress.h"
#include "core/result.h"
#include "model/model_desc.h"
#include "plan/plan_options.h"

namespace tandem {

struct instance_options {
  int gpu = -1;            // -1: the CPU reference backend; N: the CUDA backend on device N
  // Several GPUs, e.g. "0,1" or "0=16GiB,1=32GiB" (CUDA ids, optional caps): the model split
  // over them, sized by the memory plan (engine/plan), which refuses a model that does not fit
  // before any GPU memory is allocated. Overrides gpu when set.
  std::string gpus;
  std::string ratios;      // shares per device in these proportions ("1,1.75"); empty: the plan's
  std::string split;       // with gpus: "layer" (default; layer ranges) or "tensor" (every layer cut)
  unsigned n_threads = 0;  // CPU backend: 0 = all cores
  kv_cache_config cache;   // n_ctx 0: the model's training context
  uint32_t n_batch = 512;  // most tokens in one forward pass: the plan counts their activations
  bool ctx_within_training = false;  // also cap a larger n_ctx at the model's training context
  // Where the load reports the weight bytes placed so far (GPU uploads; a CPU load places its
  // mapping at once); must outlive the open. nullptr: not reported.
  load_progress* progress = nullptr;
};

// A split over CUDA devices as the memory plan lays it out (gpus, ratios and split as in
// instance_options, the cache it will hold), or the plan's reasons for refusing. An error in a
// build without the CUDA backend.
struct gpu_split {
  bool tensor = false;
  std::vector<int> devices;
  std::vector<uint32_t> layers;  // layer split: layers per device, in device order
  // Tensor split: each device's KV heads [begin, end) and FFN columns [begin, end); lead holds
  // the embeddings and the output head.
  std::vector<std::pair<uint32_t, uint32_t>> kv_heads;
  std::vector<std::pair<uint64_t, uint64_t>> ffn_columns;
  int lead = 0;
  std::string describe() const;  // "layer 13:23", "tensor kv 3:5 ffn 4352:7936"
};
struct cuda_backend_options;
// The CUDA backend's options for such a split (CUDA builds; backend/cuda/cuda_backend.h).
void fill_cuda_options(const gpu_split& split, cuda_backend_options& out);

// Whether the whole model and `cache` fit one device as the memory plan counts them: an error
// naming the bytes needed and free when not. What a single-GPU load checks before allocating.
status check_gpu_fit(const model_desc& desc, const device_spec& device, const kv_cache_config& cache,
                     uint32_t n_batch);

// For a model that cannot be split yet (split_unsupported): the index of the device in `devices`
// the whole model and `cache` fit alone with the most bytes to spare, as check_gpu_fit counts
// (caps included); an error naming each device's shortfall when it fits none.
result<size_t> pick_single_device(const model_desc& desc, const std::vector<device_spec>& devices,
                                  const kv_cache_config& cache, uint32_t n_batch);

result<gpu_split> plan_gpu_split(const model_desc& desc, const std::string& gpus, const std::string& ratios,
                                 const std::string& split, const kv_cache_config& cache, uint32_t n_batch);

// The backend `opt` asks for (CPU, or CUDA device opt.gpu), holding desc's weights; `file`, the
// mapped file desc is bound to, lets a GPU upload read the weights with pread().
result<std::unique_ptr<backend>> make_backend(const model_desc& desc, const instance_options& opt,
                                              const file_source& file = {});

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
  // Where the model runs: "cpu", "cuda:1", or "cuda:0+1" for a split (CUDA ids, caps left out).
  const std::string& placement() const { return placement_; }
  // Empty, or why the placement differs from the options (a model that cannot be split yet,
  // served on one of the GPUs it was given).
  const std::string& placement_note() const { return placement_note_; }

 private:
  loaded_model model_;
  std::string placement_;
  std::string placement_note_;
  std::unique_ptr<backend> backend_;
  std::unique_ptr<kv_cache> cache_;
};

}  // namespace tandem
