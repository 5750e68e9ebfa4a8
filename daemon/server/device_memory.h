// Total and free memory of a GPU for the status op, read off the I/O thread with a time limit.
#pragma once

#include <cstdint>
#include <optional>

namespace tandem::daemon {

struct gpu_memory {
  std::uint64_t total_bytes = 0;
  std::uint64_t free_bytes = 0;
};

// CUDA device `id`'s memory, or nothing: a build without the CUDA backend, no such device, or
// the query did not answer within the limit (a wedged GPU must not stall the I/O thread).
std::optional<gpu_memory> query_gpu_memory(int id);

}  // namespace tandem::daemon
