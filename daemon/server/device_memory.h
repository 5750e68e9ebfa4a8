// Memory by device for the status op: what tandemd's models hold on each device, the host's
// total and available memory, and each GPU's total and free memory (read off the I/O thread with
// a time limit).
#pragma once

#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

namespace tandem::daemon {

struct gpu_memory {
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
};

// CUDA device `id`'s memory, or nothing: a build without the CUDA backend, no such device, or
// the query did not answer within the limit (a wedged GPU must not stall the I/O thread).
std::optional<gpu_memory> query_gpu_memory(int id);

// The status op's "devices" from its "models" (registry describe()): one entry per device with
// the resident models and their bytes; "cpu" always, with the host's total and available bytes;
// each GPU with its total and free bytes where query_gpu_memory answers. A model split over
// GPUs ("cuda:0+1") counts its bytes under that name and is listed on each of its GPUs too.
nlohmann::json devices_json(const nlohmann::json& models);

}  // namespace tandem::daemon
