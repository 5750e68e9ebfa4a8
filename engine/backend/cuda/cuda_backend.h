// The CUDA backend on one GPU: weights uploaded once in their GGUF types, KV cache (and a hybrid
// model's recurrent state) in device memory, decode through quantized mat-vec kernels and prefill
// through cuBLAS.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/file_source.h"
#include "core/file_source.h"
#include "core/load_progress.h"

namespace tandem {

class cuda_step_profile;

// A device's share of a tensor split: its KV heads (with their query heads) and FFN columns,
// half-open ranges; the lead also holds the embeddings and the output head.
struct cuda_tensor_share {
  uint32_t kv_head_begin = 0, kv_head_end = 0;
  uint64_t ffn_begin = 0, ffn_end = 0;
  bool lead = false;
};

struct cuda_backend_options {
  int device = 0;
  // Layer split over several GPUs: devices[i] holds the next layers_per_device[i] layers (the
  // first also the token embedding, the last the output norm and head), and the residual stream
  // is handed from one to the next once per forward pass. Empty: the whole model on `device`.
  // A device may appear twice (each stage has its own context), which tests the split on one GPU.
  std::vector<int> devices;
  std::vector<uint32_t> layers_per_device;
  // Tensor split instead (distinct devices): devices[i] computes tensor_shares[i] of every layer;
  // the partial attention and FFN outputs are summed over the devices with an all-reduce. The
  // shares must cover every KV head and FFN column once.
  std::vector<cuda_tensor_share> tensor_shares;
  // How a tensor split's devices exchange partial sums: auto, peer, host or nccl (see
  // cuda_collective.h). Empty: the TANDEM_CUDA_EXCHANGE environment variable, else auto.
  std::string exchange;
  // The weight upload (cuda_upload.h): threads (0: TANDEM_CUDA_UPLOAD_THREADS, else 4), each with two
  // pinned buffers of staging_bytes; progress, when set, gets the bytes as they are queued.
  int upload_threads = 0;
  size_t staging_bytes = 32ull << 20;
  load_progress* progress = nullptr;
  // The mapped model file: with TANDEM_CUDA_UPLOAD_PREAD=1 its weights are read with pread()
  // (cuda_upload.h), not yet measured and so not the default.
  file_source file;
  // Replay decode steps as captured CUDA graphs (the environment variable TANDEM_CUDA_GRAPHS=0
  // turns them off too, for measuring what they save).
  bool graphs = true;
  // Times each launch group of every forward into *profile (cuda_profile.h; one GPU only,
  // graphs off while set). The profile must outlive the backend's forwards.
  cuda_step_profile* profile = nullptr;
};

// What loading the weights cost; bench and logs report it.
struct cuda_load_stats {
  uint64_t bytes = 0;           // weight bytes copied to the device
  double seconds = 0;           // wall time of the upload (host reads of the mapping included)
  uint64_t device_bytes = 0;    // device memory the weights occupy
  std::string device_name;      // "NVIDIA H200 (sm_90, 139.8 GiB)"
};

// The backend interface plus what only the CUDA backend offers.
class cuda_backend_api : public backend {
 public:
  virtual const cuda_load_stats& load_stats() const = 0;
  // Matrix bytes one decode step reads (every layer matrix and the output head).
  virtual uint64_t weight_bytes_per_token() const = 0;
  // Recurrent state bytes one decode token reads and writes (hybrid models: its sequence's conv
  // inputs and S in every DeltaNet layer, read once and written once); 0 for attention-only models.
  virtual uint64_t state_bytes_per_token() const { return 0; }
  // The interface's forward_argmax, which every CUDA backend must implement on the GPU: the
  // logits stay on the device and only each wanted row's argmax is copied back (greedy sampling
  // without n_vocab floats per token over PCIe).
  status forward_argmax(const batch& b, kv_cache& cache, std::vector<int32_t>& ids) override = 0;
  // Forward steps so far that replayed a captured CUDA graph instead of launching kernels.
  virtual uint64_t graph_replays() const = 0;
};

// Uploads the model to `opt.device`. The model description (and its file) must outlive the
// backend, as model() hands it out, but the weights are copied and their pages not touched
// again. forward() is not safe to call from two threads at once on one instance.
result<std::unique_ptr<cuda_backend_api>> make_cuda_backend(const model_desc& desc,
                                                            const cuda_backend_options& opt = {});

// Number of usable CUDA devices (0 without a driver or GPU); tests skip on 0.
int cuda_backend_device_count();

}  // namespace tandem
