// Internal to the CUDA backend: one device's part of a model (a layer range, plus the embedding
// lookup on the first part and the output head on the last) as the layer split drives it. The
// single-GPU backend is a stage that holds every layer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_weights.h"

namespace tandem {

constexpr int k_cuda_max_batch = 65535;  // grid-y limit of the per-token kernels

class cuda_stage : public cuda_backend_api {
 public:
  // Where a stage after the first takes its input activations: the previous stage's hidden()
  // on its device, once that stage's done() event has fired.
  struct input {
    const float* x = nullptr;
    int device = 0;
    cudaEvent_t ready = nullptr;
  };
  // Runs the batch through this stage's layers. `book` is the split's cache (positions, slots;
  // already grown for the batch), `part` this stage's K/V (made by its make_cache). With
  // argmax, the last stage also leaves each logits row's argmax for copy_out.
  virtual status run_stage(const batch& b, const kv_cache& book, kv_cache& part, const input& in, bool argmax) = 0;
  virtual const float* hidden() const = 0;  // the residual stream after this stage's layers
  virtual cudaEvent_t done() const = 0;     // recorded after each run_stage
  virtual int device() const = 0;
  // Copies the last step's logits and/or argmax ids to the host (then waits for the stream).
  virtual status copy_out(std::vector<float>* logits, std::vector<int32_t>* ids) = 0;
};

// A stage on `device` holding `range` of the model.
result<std::unique_ptr<cuda_stage>> make_cuda_stage(const model_desc& desc, int device, const weight_range& range,
                                                    const cuda_backend_options& opt);

// The layer split over these stages, in order (cuda_split_backend.cpp).
std::unique_ptr<cuda_backend_api> make_cuda_split_backend(const model_desc& desc,
                                                          std::vector<std::unique_ptr<cuda_stage>> stages);

}  // namespace tandem
