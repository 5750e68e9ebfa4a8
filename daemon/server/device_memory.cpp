// Memory by device for the status op (see device_memory.h).
#include "server/device_memory.h"

#include <fstream>
#include <map>
#include <sstream>
#include <string>

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

namespace {

// MemTotal and MemAvailable of /proc/meminfo, in bytes (0 when unreadable).
void host_memory(std::uint64_t& total, std::uint64_t& available) {
  std::ifstream f("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  total = available = 0;
  while (f >> key >> kib >> unit) {
    if (key == "MemTotal:") total = kib * 1024;
    if (key == "MemAvailable:") available = kib * 1024;
  }
}

}  // namespace

nlohmann::json devices_json(const nlohmann::json& models) {
  using json = nlohmann::json;
  std::map<std::string, json> by_device;
  auto entry = [&by_device](const std::string& name) -> json& {
    auto& d = by_device[name];
    if (d.is_null()) d = {{"device", name}, {"models", json::array()}, {"model_bytes", std::uint64_t{0}}};
    return d;
  };
  for (const auto& m : models) {
    if (!m.contains("device")) continue;  // not resident
    const std::string name = m["device"].get<std::string>();
    auto& d = entry(name);
    d["models"].push_back(m["name"]);
    d["model_bytes"] = d["model_bytes"].get<std::uint64_t>() + m.value("bytes", std::uint64_t{0});
    if (name.rfind("cuda:", 0) != 0 || name.find('+') == std::string::npos) continue;
    std::stringstream ids(name.substr(5));
    for (std::string id; std::getline(ids, id, '+');) entry("cuda:" + id)["models"].push_back(m["name"]);
  }
  auto& cpu = entry("cpu");
  std::uint64_t total = 0, available = 0;
  host_memory(total, available);
  cpu["total_bytes"] = total;
  cpu["available_bytes"] = available;
  for (auto& [name, d] : by_device) {
    if (name.rfind("cuda:", 0) != 0 || name.find('+') != std::string::npos) continue;  // one GPU only
    if (auto g = query_gpu_memory(std::stoi(name.substr(5)))) {
      d["total_bytes"] = g->total_bytes;
      d["available_bytes"] = g->free_bytes;
    }
  }
  auto out = json::array();
  for (auto& [name, d] : by_device) out.push_back(std::move(d));
  return out;
}

}  // namespace tandem::daemon
