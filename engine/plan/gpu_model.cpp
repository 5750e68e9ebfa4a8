// The table of named GPU models. Spec figures are NVIDIA's data-sheet ceilings; memory sizes are
// what the CUDA runtime reports for the card.
#include "plan/gpu_model.h"

#include <algorithm>
#include <cctype>

namespace tandem {
namespace {

// Memory: totalGlobalMem as deviceQuery prints it for the V100s (16160 and 32510 MiB of the CUDA
// runtime's count), and as read on this project's nvidia-h200 machine (cuDeviceTotalMem,
// 2026-12; nvidia-smi says 143771 MiB there): a little less than the nominal 16 / 32 GiB, more
// than the nominal 141 GB.
// Links: PCIe 3.0 x16 moves about 12 GB/s per direction between two V100s with peer access (of
// 15.75 raw). Through host memory (no peer access, e.g. inside LXC) each message crosses the bus
// twice and the receiver reads it back over PCIe; half the peer rate is an allowance for that,
// not a measurement. The H200s of an HGX board reach each other over NVLink 4 (450 GB/s per
// direction); staged through host memory they go over PCIe 5.0 x16 instead, taken as half of its
// usable ~50 GB/s by the same rule.
constexpr gpu_model k_models[] = {
    {"v100-16gb", "Tesla V100-PCIE-16GB", 16945512448ull, 900e9, 112e12, 12e9, 6e9},
    {"v100-32gb", "Tesla V100-PCIE-32GB", 34089730048ull, 900e9, 112e12, 12e9, 6e9},
    {"h200", "NVIDIA H200", 150109880320ull, 4.8e12, 989e12, 450e9, 25e9},
};

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::span<const gpu_model> all_gpu_models() { return k_models; }

const gpu_model* find_gpu_model(std::string_view name) {
  for (const gpu_model& m : k_models)
    if (same_name(m.name, name)) return &m;
  return nullptr;
}

std::string gpu_model_names() {
  std::string out;
  for (const gpu_model& m : k_models) out += (out.empty() ? "" : ", ") + std::string(m.name);
  return out;
}

}  // namespace tandem
