// tandem's own exchange between the devices of a tensor split (kernels/collective.h): the inboxes
// and flags each rank's kernel writes and waits on, in device memory reached by peer access or in
// mapped pinned host memory, and one rank object per device.
#include <algorithm>
#include <cstring>
#include <memory>

#include "backend/cuda/cuda_collective.h"
#include "kernels/collective.h"
#include "kernels/cuda_check.h"

namespace tandem {
namespace {

// Every rank's memory, shared by the rank objects and freed when the last one goes.
struct exchange_buffers {
  std::vector<int> devices;
  bool host = false;
  std::vector<void*> boxes;    // per rank: inbox then flags (device memory, or pinned host memory)
  std::vector<void*> epochs;   // per rank: its block counters, device memory

  ~exchange_buffers() {
    int cur = 0;
    TANDEM_CUDA_LOG(cudaGetDevice(&cur));
    for (size_t i = 0; i < devices.size(); ++i) {
      TANDEM_CUDA_LOG(cudaSetDevice(devices[i]));
      if (i < boxes.size() && boxes[i]) TANDEM_CUDA_LOG(host ? cudaFreeHost(boxes[i]) : cudaFree(boxes[i]));
      if (i < epochs.size() && epochs[i]) TANDEM_CUDA_LOG(cudaFree(epochs[i]));
    }
    TANDEM_CUDA_LOG(cudaSetDevice(cur));
  }
};

class exchange_rank final : public cuda_collective {
 public:
  exchange_rank(std::shared_ptr<exchange_buffers> mem, const exchange_view& view)
      : mem_(std::move(mem)), view_(view) {}
  int rank() const override { return view_.rank; }
  int size() const override { return view_.size; }

  // Messages larger than a slot go in slot-sized pieces, each a call of its own on every rank.
  status all_reduce_sum(float* buf, size_t n, cudaStream_t stream) override {
    for (size_t off = 0; off < n; off += size_t(view_.capacity))
      TANDEM_CUDA_TRY(launch_exchange_sum(view_, buf + off, int64_t(std::min(n - off, size_t(view_.capacity))), stream));
    return {};
  }
  status broadcast(float* buf, size_t n, int root, cudaStream_t stream) override {
    for (size_t off = 0; off < n; off += size_t(view_.capacity))
      TANDEM_CUDA_TRY(launch_exchange_broadcast(view_, buf + off, int64_t(std::min(n - off, size_t(view_.capacity))),
                                                root, stream));
    return {};
  }

 private:
  std::shared_ptr<exchange_buffers> mem_;
  exchange_view view_;
};

status enable_peers(const std::vector<int>& devices, size_t i) {
  for (size_t j = 0; j < devices.size(); ++j) {
    if (j == i) continue;
    const cudaError_t e = cudaDeviceEnablePeerAccess(devices[j], 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // not an error here; clear it so later checks do not see it
      continue;
    }
    TANDEM_CUDA_TRY(e);
  }
  return {};
}

// Rank i's inbox, flags and counters, all zero (on its device, which is current).
status allocate_rank(exchange_buffers& m, size_t i, size_t box_bytes, size_t epoch_bytes) {
  void* box = nullptr;
  if (m.host) {
    TANDEM_CUDA_TRY(cudaHostAlloc(&box, box_bytes, cudaHostAllocPortable | cudaHostAllocMapped));
    m.boxes[i] = box;
    std::memset(box, 0, box_bytes);
  } else {
    TANDEM_CUDA_TRY(cudaMalloc(&box, box_bytes));
    m.boxes[i] = box;
    TANDEM_CUDA_TRY(cudaMemset(box, 0, box_bytes));
  }
  TANDEM_CUDA_TRY(cudaMalloc(&m.epochs[i], epoch_bytes));
  TANDEM_CUDA_TRY(cudaMemset(m.epochs[i], 0, epoch_bytes));
  TANDEM_CUDA_TRY(cudaDeviceSynchronize());
  return {};
}

}  // namespace

result<std::vector<std::unique_ptr<cuda_collective>>> make_exchange_collectives(const std::vector<int>& devices,
                                                                                bool host_memory) {
  const int size = int(devices.size());
  const int64_t cap = k_exchange_capacity;
  const size_t inbox_bytes = size_t(exchange_inbox_floats(size, cap)) * sizeof(float);
  const size_t words_end = inbox_bytes + size_t(exchange_word_count(size)) * sizeof(uint64_t);
  const size_t box_bytes = exchange_box_bytes(size), epoch_bytes = exchange_counter_bytes();
  auto mem = std::make_shared<exchange_buffers>();
  mem->devices = devices;
  mem->host = host_memory;
  mem->boxes.assign(devices.size(), nullptr);
  mem->epochs.assign(devices.size(), nullptr);
  int cur = 0;
  TANDEM_CUDA_TRY(cudaGetDevice(&cur));
  status st;
  for (size_t i = 0; i < devices.size() && st; ++i) {
    st = [&]() -> status {
      TANDEM_CUDA_TRY(cudaSetDevice(devices[i]));
      if (!host_memory) TANDEM_TRY(enable_peers(devices, i));
      return allocate_rank(*mem, i, box_bytes, epoch_bytes);
    }();
  }
  TANDEM_CUDA_TRY(cudaSetDevice(cur));
  if (!st) return make_error("tensor split exchange (", host_memory ? "host memory" : "peer access", "): ", st.message());
  std::vector<std::unique_ptr<cuda_collective>> out;
  for (int r = 0; r < size; ++r) {
    exchange_view v;
    v.rank = r, v.size = size, v.capacity = cap;
    for (int s = 0; s < size; ++s) {
      // Mapped pinned memory has the same address on every device (unified addressing).
      auto* box = static_cast<char*>(mem->boxes[size_t(s)]);
      v.inbox[s] = reinterpret_cast<float*>(box);
      v.words[s] = reinterpret_cast<uint64_t*>(box + inbox_bytes);
      v.flags[s] = reinterpret_cast<uint32_t*>(box + words_end);
    }
    v.epochs = static_cast<uint32_t*>(mem->epochs[size_t(r)]);
    out.push_back(std::make_unique<exchange_rank>(mem, v));
  }
  return out;
}

}  // namespace tandem
