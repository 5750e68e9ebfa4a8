// Memory of a CUDA device as the planner needs it, behind a plain C++ header (no CUDA includes),
// so tools can ask without owning a backend.
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"

namespace tandem {

struct cuda_device_memory {
  int id = 0;
  std::string name;          // "NVIDIA H200"
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;   // read inside this process's context, so the context is already out of it
};

// Makes `device` current (creating its primary context) and reads cudaMemGetInfo. Errors: no
// such device, or the runtime call that failed.
result<cuda_device_memory> query_cuda_device_memory(int device);

}  // namespace tandem
