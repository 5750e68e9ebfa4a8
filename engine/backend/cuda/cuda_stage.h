// Internal to the CUDA backend: one device's part of a model (a layer range, plus the embedding
// lookup on the first part and the output head on the last) as the layer split drives it. The
// single-GPU backend is a stage that holds every layer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_collective.h"
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
  // The tensor split runs a step in two phases: prepare (plans the batch and allocates, from one
  // thread, so that no device fails an allocation after another has entered a collective), then
  // launch (enqueues the layers, collectives included, from the thread driving this device).
  virtual status prepare_stage(const batch& b, const kv_cache& book) = 0;
  virtual status launch_stage(kv_cache& part, bool argmax) = 0;
  // Tensor split: the collective this device's layers sum their partial outputs with, and the
  // rank that holds the embeddings (and adds the residual stream).
  virtual void set_collective(cuda_collective* comm, int lead_rank) = 0;
  virtual cudaStream_t stream() const = 0;
  virtual const float* hidden() const = 0;  // the residual stream after this stage's layers
  virtual cudaEvent_t done() const = 0;     // recorded after each run_stage
  virtual int device() const = 0;
  // Copies the last step's logits and/or argmax ids to the host (then waits for the stream).
  virtual status copy_out(std::vector<float>* logits, std::vector<int32_t>* ids) = 0;
};

// A cache of a model split over stages: the positions and slots all devices share (this
// object's own bookkeeping) and one K/V part per stage, made by that stage.
class cuda_stage_cache final : public kv_cache {
 public:
  cuda_stage_cache(const kv_cache_config& cfg, const void* owner) : kv_cache(cfg), owner_(owner) {}
  uint64_t bytes() const override {
    uint64_t n = 0;
    for (const auto& p : parts) n += p->bytes();
    return n;
  }
  const void* owner() const { return owner_; }
  std::vector<std::unique_ptr<kv_cache>> parts;

 private:
  const void* owner_;
};

// A stage on `device` holding `range` of the model.
result<std::unique_ptr<cuda_stage>> make_cuda_stage(const model_desc& desc, int device, const weight_range& range,
                                                    const cuda_backend_options& opt);

// The layer split over these stages, in order (cuda_split_backend.cpp).
std::unique_ptr<cuda_backend_api> make_cuda_split_backend(const model_desc& desc,
                                                          std::vector<std::unique_ptr<cuda_stage>> stages);

// The tensor split over these stages, stage i being rank i of `comms` and `lead` the one with
// the embeddings and the output head (cuda_tensor_backend.cpp).
std::unique_ptr<cuda_backend_api> make_cuda_tensor_backend(const model_desc& desc,
                                                           std::vector<std::unique_ptr<cuda_stage>> stages,
                                                           std::vector<std::unique_ptr<cuda_collective>> comms,
                                                           int lead);

}  // namespace tandem
