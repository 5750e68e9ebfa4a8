// Named GPU models for planning hardware that is not in this machine: their memory and the spec
// ceilings (bandwidth, fp16 tensor rate, the link between devices) the speed model scales by.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tandem {

struct gpu_model {
  std::string_view name;         // what --devices takes: "v100-16gb"
  std::string_view description;  // the product: "Tesla V100-PCIE-16GB"
  // What cudaGetDeviceProperties reports as totalGlobalMem (a real device's plan starts there),
  // not the marketing size.
  uint64_t memory_bytes = 0;
  double bandwidth = 0;   // spec memory bandwidth, bytes/s
  double fp16_flops = 0;  // spec dense fp16 tensor-core rate (fp32 accumulate), FLOP/s
  // What a tensor split's exchange sees between two such devices, bytes/s per direction: with
  // peer access, and staged through mapped host memory where there is none.
  double link_bytes_per_s = 0;
  double host_link_bytes_per_s = 0;
};

// Every known model, in a stable order.
std::span<const gpu_model> all_gpu_models();

// By name, ignoring case; nullptr for an unknown name.
const gpu_model* find_gpu_model(std::string_view name);

// "v100-16gb, v100-32gb, h200", for messages.
std::string gpu_model_names();

}  // namespace tandem
