// Parsing of the plan's user-facing options (--devices, --ratios, --split, sizes) and byte
// formatting. Every error names the offending item and says what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "plan/gpu_model.h"
#include "plan/plan_options.h"

namespace tandem {

// One item of a --devices list: a CUDA device id with an optional cap ("0", "0=16GiB"), the
// size of a device that is not in this machine ("16GiB"), or a named GPU model that is not in
// this machine, with an optional cap ("v100-16gb", "v100-32gb=20GiB"; plan/gpu_model.h).
struct device_request {
  int cuda_id = -1;    // -1: a size or a GPU model
  uint64_t bytes = 0;  // the cap (with an id or a model) or the device size (without); 0: none given
  const gpu_model* gpu = nullptr;  // the named model, sized from its table entry
  std::string text;    // the item as written, for messages
};

// "16GiB", "512MiB", "1.5G", "24GB", "1048576". Binary units: K M G T, KiB MiB GiB TiB;
// decimal: KB MB GB TB; no unit (or B): bytes. Case-insensitive; the value must be positive.
result<uint64_t> parse_byte_size(std::string_view text);

// Comma-separated device items; duplicates of one CUDA id are refused (of a GPU model they are
// several cards of that model).
result<std::vector<device_request>> parse_device_list(std::string_view spec);

// "1,1.75": positive finite numbers.
result<std::vector<double>> parse_ratio_list(std::string_view text);

// "none", "layer" or "tensor".
result<split_mode> parse_split_mode(std::string_view text);

// A hypothetical device (all of it free): of `bytes`, named after the request, or of a GPU
// model's memory with the request's cap, named after the model.
device_spec sized_device(const device_request& r);

// A CUDA device of this machine as its memory was read (cudaMemGetInfo inside this process's
// context), with the request's cap.
device_spec measured_device(const device_request& r, const std::string& gpu_name, uint64_t total_bytes,
                            uint64_t free_bytes);

// "15.25 GiB", "512.0 MiB", "300 B".
std::string plan_bytes_text(uint64_t bytes);

}  // namespace tandem
