// Chooses the tensor split's transport (see cuda_collective.h).
#include "backend/cuda/cuda_collective.h"

#include <cstdlib>
#include <set>
#include <string>

#include "kernels/collective.h"
#include "kernels/cuda_check.h"

namespace tandem {

result<collective_transport> parse_collective_transport(std::string_view s) {
  if (s == "auto") return collective_transport::automatic;
  if (s == "peer") return collective_transport::peer;
  if (s == "host") return collective_transport::host;
  if (s == "nccl") return collective_transport::nccl;
  return make_error("unknown exchange transport '", std::string(s), "' (auto, peer, host or nccl)");
}

std::string_view collective_transport_name(collective_transport t) {
  switch (t) {
    case collective_transport::automatic: return "auto";
    case collective_transport::peer: return "peer";
    case collective_transport::host: return "host";
    case collective_transport::nccl: return "nccl";
  }
  return "?";
}

result<collective_transport> collective_transport_from_env() {
  const char* e = std::getenv("TANDEM_CUDA_EXCHANGE");
  if (!e || !*e) return collective_transport::automatic;
  auto t = parse_collective_transport(e);
  if (!t) return make_error("TANDEM_CUDA_EXCHANGE: ", t.message());
  return t;
}

namespace {

// Whether every device can write every other's memory directly.
result<bool> all_pairs_peer(const std::vector<int>& devices) {
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int ok = 0;
      TANDEM_CUDA_TRY(cudaDeviceCanAccessPeer(&ok, a, b));
      if (!ok) return false;
    }
  return true;
}

}  // namespace

result<std::vector<std::unique_ptr<cuda_collective>>> make_cuda_collectives(const std::vector<int>& devices,
                                                                            collective_transport transport,
                                                                            collective_transport* used) {
  if (devices.size() < 2) return make_error("a tensor split needs at least two devices");
  if (devices.size() > size_t(k_exchange_max_ranks))
    return make_error("a tensor split takes at most ", k_exchange_max_ranks, " devices");
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size())
    return make_error("a tensor split needs distinct devices (one rank per GPU)");
  if (transport == collective_transport::automatic) {
    auto peer = all_pairs_peer(devices);
    if (!peer) return peer.err();
    transport = *peer ? collective_transport::peer : collective_transport::host;
  }
  if (used) *used = transport;
  if (transport == collective_transport::nccl) return make_nccl_collectives(devices);
  return make_exchange_collectives(devices, transport == collective_transport::host);
}

}  // namespace tandem
