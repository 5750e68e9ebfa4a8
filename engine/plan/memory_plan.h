// The memory plan: computed from a bound model description and a device list before anything is
// allocated. It says which device holds which tensor or shard, where each layer's KV heads live,
// and how many bytes each device needs by category, using the same formulas as the CUDA backend's
// allocations (backend/cuda/cuda_backend.cpp, cuda_weights.cpp), so a load can be refused up front.
// Hybrid models (qwen35): attention layers hold KV, Gated DeltaNet layers a recurrent state per
// sequence (and its checkpoint copy), each counted on the devices holding those layers and heads.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "model/model_desc.h"
#include "plan/plan_options.h"

namespace tandem {

// What part of the model one device computes. Ranges are half-open.
struct device_share {
  uint32_t layer_begin = 0, layer_end = 0;      // layers whose weights and KV cache / state it holds
  uint32_t kv_head_begin = 0, kv_head_end = 0;  // KV heads (query heads: times the group size)
  // Gated DeltaNet layers are cut by key heads [dn_head_begin, dn_head_end) of Hk; the value heads
  // follow (delta_net_value_runs), and with them the conv channels and the recurrent state.
  uint32_t dn_head_begin = 0, dn_head_end = 0;
  uint64_t ffn_begin = 0, ffn_end = 0;          // FFN columns (rows of gate/up, inputs of down)
  bool embeddings = false;                      // token_embd and the lookup
  bool output = false;                          // output_norm, the output head and the logits
  bool used() const { return layer_end > layer_begin || embeddings || output; }
};

// How a tensor (or its shard) lies on a device. rows: rows [begin, end) of the stored matrix
// (outputs); columns: elements [begin, end) of every row (inputs); whole/replica: all of it
// (replica: other devices hold copies too).
enum class placement_kind { whole, replica, rows, columns };

struct tensor_placement {
  const gguf_tensor* tensor = nullptr;
  int device = 0;  // index into the plan's devices
  placement_kind kind = placement_kind::whole;
  uint64_t begin = 0, end = 0;  // along dims[1] for rows, dims[0] for columns; 0, 0 otherwise
  uint64_t file_bytes = 0;      // bytes of the file's tensor data this placement covers
};

// Device bytes by category. Each category is the sum of the backend's allocations for it, each
// allocation rounded up to the allocation granularity.
struct device_usage {
  uint64_t weights = 0;      // matrices in GGUF types (256-byte aligned) + float32 norms/biases
  uint64_t experts = 0;      // MoE models: the routed experts' 3-D tensors, one buffer of their own
  uint64_t kv_cache = 0;     // K and V of the device's attention layers and KV heads
  // Hybrid models: every sequence's recurrent state (conv inputs and S, fp32) of the device's
  // DeltaNet layers and heads, plus the checkpoint copy the cache keeps of it (kv_cache.h).
  uint64_t state = 0;
  uint64_t activations = 0;  // per-token buffers sized for n_batch tokens, logits on the output device
  uint64_t workspace = 0;    // fp16 weight tile, decode attention partials
  uint64_t overhead = 0;     // CUDA context, cuBLAS workspace, NCCL (estimates)
  uint64_t total = 0;
  uint64_t tensor_bytes = 0;  // file bytes of the tensors and shards it holds (no padding)

  uint64_t capacity = 0;   // min(total, cap, free [+ context]) of the device
  uint64_t available = 0;  // capacity minus the margin
  bool fits = true;
  uint64_t shortfall = 0;  // total - available when it does not fit
};

struct memory_plan {
  split_mode split = split_mode::none;
  std::vector<double> ratios;  // normalized shares, one per device (sum 1)
  bool default_ratios = false;
  int main_device = 0;
  uint32_t n_ctx = 0, n_seqs = 0, n_batch = 0, n_logits = 0, block_size = 0;
  ggml_type kv_type = ggml_type::f16;
  uint64_t model_tensor_bytes = 0;  // file bytes of every tensor the model uses

  std::vector<device_spec> devices;
  std::vector<device_share> shares;
  std::vector<device_usage> usage;
  std::vector<tensor_placement> tensors;

  bool fits = true;
  std::vector<std::string> reasons;  // why not, one line per device that is short
  std::vector<std::string> notes;    // caveats (a KV type the CUDA backend lacks, idle devices)
};

// Validates the options (errors name the option) and computes the plan. Not fitting is not an
// error: the plan says so in fits/reasons.
result<memory_plan> make_memory_plan(const model_desc& desc, const plan_options& opt);

// The bytes one device needs for `share` under `opt` (n_ctx already resolved). Exposed for the
// backend, which can compare it with what it allocated, and for tests.
result<device_usage> device_footprint(const model_desc& desc, const plan_options& opt, const device_share& share,
                                      int n_used_devices, std::vector<tensor_placement>* placements = nullptr,
                                      int device_index = 0);

// The value heads a DeltaNet cut gives a device, as half-open runs of head indices. V-head h uses
// k-head h % Hk (the file's tiled order), so key heads [g0, g1) come with the Hv/Hk runs
// [j·Hk + g0, j·Hk + g1): the one cut under which no key head's q/k is needed on two devices. A
// cut into contiguous value-head ranges would need every key head on each side once a range spans
// Hk heads. Empty without DeltaNet heads.
std::vector<std::pair<uint64_t, uint64_t>> delta_net_value_runs(const hparams& hp, const device_share& s);

// What every used device spends besides its buffers: the CUDA context, cuBLAS's workspace and,
// in a tensor split over several devices, the exchange buffers (and NCCL's, if charged).
uint64_t device_overhead_bytes(const plan_options& opt, int n_used_devices);

}  // namespace tandem
