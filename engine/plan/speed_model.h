// Expected decode and prefill speed of a memory plan on named GPU models (plan/gpu_model.h): what
// a token costs each device (bytes read for decode, FLOPs for prefill, its share under the plan's
// split) over that device's spec ceilings times the fraction of those ceilings the kernels reach
// on one H200, plus what the split sends between devices over the link.
// This is a model, not a measurement: it assumes the kernels reach the same fraction of a V100's
// (or any listed GPU's) spec bandwidth and fp16 tensor rate as they do of the H200's; it ignores
// per-message latency of the exchange and any overlap of transfers with compute.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "model/model_desc.h"
#include "plan/gpu_model.h"
#include "plan/memory_plan.h"

namespace tandem {

// The prompt lengths prefill is estimated at (bench's pp2048 and pp16384, from an empty cache).
constexpr std::array<uint32_t, 2> k_prefill_lengths = {2048, 16384};
// Decode is bench's tg128 from an empty cache: batch 1, K/V of (128 + 1) / 2 keys per token.
constexpr uint32_t k_decode_tokens = 128;

// Fractions of spec ceilings the kernels reach.
struct speed_calibration {
  double decode = 0;                // a decode token's bytes per second / spec memory bandwidth
  std::array<double, 2> prefill{};  // prompt FLOP/s / spec fp16 rate, at k_prefill_lengths
  std::string_view source;          // where the fractions were measured, for reports
};

// Measured on one H200 (speed_model.cpp says which run).
speed_calibration h200_calibration();

// One device's share of one token's work.
struct device_cost {
  uint64_t weight_bytes = 0;  // active matrix bytes (read once per decode token)
  uint64_t state_bytes = 0;   // recurrent state read and written per decode token
  double kv_bytes = 0;        // K/V a decode token reads at tg128's average depth
  double params = 0;          // matrix weights a token multiplies with
  std::array<double, 2> prefill_flops{};  // per prompt token, at k_prefill_lengths
  double decode_bytes() const { return double(weight_bytes) + double(state_bytes) + kv_bytes; }
};

// Speeds with the split's transfers at one link rate.
struct speed_figures {
  double link_bytes_per_s = 0;  // per direction; 0 when nothing crosses a link
  double decode_tok_s = 0;
  std::array<double, 2> prefill_tok_s{};
};

struct speed_estimate {
  std::vector<const gpu_model*> gpus;  // one per plan device
  std::vector<device_cost> devices;    // one per plan device (zero for an unused one)
  int n_used = 0;
  // Bytes per token that cross a link on the critical path: what each device of a tensor split
  // sends in its sums and broadcast (all at once), a layer split's hand-overs of the residual
  // stream (one after another); 0 on one device.
  double decode_link_bytes = 0, prefill_link_bytes = 0;
  speed_figures peer;  // at the slowest used device's peer link (NVLink, PCIe peer access)
  speed_figures host;  // staged through host memory (no peer access)
  speed_calibration calibration;
};

// One GPU model per plan device. Errors: a count that is not the plan's, a missing model.
result<speed_estimate> estimate_speed(const model_desc& desc, const memory_plan& plan,
                                      const std::vector<const gpu_model*>& gpus,
                                      const speed_calibration& cal = h200_calibration());

// What each device of the plan computes per token (exposed for tests and the calibration).
device_cost device_token_cost(const model_desc& desc, const memory_plan& plan, size_t device);

}  // namespace tandem
