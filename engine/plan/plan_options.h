// What a memory plan is computed from: the devices (real or hypothetical), the cache and batch
// the model will run with, how the model is split, and the runtime constants the plan assumes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "quant/ggml_type.h"

namespace tandem {

// none: the whole model on the main device. layer: each device a contiguous range of layers.
// tensor: every layer on every device, attention split by KV-head groups and the FFN by columns.
enum class split_mode { none, layer, tensor };

std::string_view split_mode_name(split_mode m);

struct device_spec {
  int cuda_id = -1;         // -1: hardware that is not in this machine, given by its size
  std::string name;         // "cuda:0 NVIDIA H200" or "16GiB"
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;  // free memory as reported (== total for a hypothetical device)
  uint64_t cap_bytes = 0;   // 0: no cap; else the plan may use at most this much of the device
  // free_bytes was read inside this process's CUDA context, so the context is already taken out
  // of it; the plan then adds its context estimate back before comparing.
  bool context_in_free = false;
  double speed = 1.0;       // relative memory bandwidth, for the default ratios
};

// Device memory the plan charges besides the buffers the backend allocates itself. These are
// estimates, not measurements: calibrate them on the target GPU (docs/multi-gpu.md).
struct runtime_constants {
  uint64_t cuda_context_bytes = 512ull << 20;    // primary context, module images, local memory
  uint64_t cublas_workspace_bytes = 32ull << 20;  // cuBLAS's default workspace on sm_90 (4 MiB before)
  // A tensor split's exchange buffers come from core/exchange_layout.h (exact, not an estimate).
  // With TANDEM_CUDA_EXCHANGE=nccl, NCCL's buffers come on top: measured 364-432 MiB per device
  // through host memory and 820-890 MiB with NVLink on two H200s (docs/multi-gpu.md); set this
  // to charge them.
  uint64_t nccl_bytes = 0;
  uint64_t alloc_granularity = 2ull << 20;       // cudaMalloc hands out whole 2 MiB pages
};

struct plan_options {
  std::vector<device_spec> devices;
  uint32_t n_ctx = 0;        // tokens per sequence; 0: the model's training context
  uint32_t n_seqs = 1;       // sequences the KV cache holds at full context
  uint64_t n_kv_tokens = 0;  // the KV pool's token slots shared by the sequences; 0: n_seqs × n_ctx
  uint32_t n_batch = 512;    // most tokens in one forward pass (prefill chunk)
  uint32_t n_logits = 0;     // most logit rows per forward pass; 0: n_seqs (one per sequence)
  uint32_t block_size = 16;  // KV cache slots per block
  ggml_type kv_type = ggml_type::f16;
  split_mode split = split_mode::none;
  std::vector<double> ratios;  // one per device, > 0; empty: balance time subject to memory
  int main_device = -1;        // index into devices; -1: the one with the most room
  uint64_t margin_bytes = 256ull << 20;  // kept free on every device
  runtime_constants rt;
};

}  // namespace tandem
