// GPU memory for the status op (see device_memory.h).
#include "server/device_memory.h"

#ifdef TANDEM_HAVE_CUDA_BACKEND
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "backend/cuda/cuda_device_info.h"
#endif

namespace tandem::daemon {

#ifdef TANDEM_HAVE_CUDA_BACKEND
std::optional<gpu_memory> query_gpu_memory(int id) {
  // One query at a time: while an earlier one is stuck, report nothing instead of piling up
  // threads behind a wedged device.
  static std::atomic<bool> busy{false};
  if (busy.exchange(true)) return std::nullopt;
  auto done = std::make_shared<std::promise<std::optional<gpu_memory>>>();
  auto answer = done->get_future();
  std::thread([done, id] {
    auto m = query_cuda_device_memory(id);
    done->set_value(m ? std::optional<gpu_memory>(gpu_memory{m->total_bytes, m->free_bytes}) : std::nullopt);
    busy = false;
  }).detach();
  if (answer.wait_for(std::chrono::milliseconds(500)) != std::future_status::ready) return std::nullopt;
  return answer.get();
}
#else
std::optional<gpu_memory> query_gpu_memory(int) { return std::nullopt; }
#endif

}  // namespace tandem::daemon
