// Per-model serving settings: the options of the load and swap ops (tandem-protocol(7)) and the
// keys of a [model.NAME] table (tandemd.conf(5)). Each is optional: an unset one falls back to the
// next level, a request's to its alias's table, a table's to the global keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::proto {

struct model_settings {
  std::optional<std::string> gpus;    // CUDA devices to split over: "0,1", "0=16GiB,1=32GiB"
  std::optional<std::string> split;   // with gpus: layer or tensor
  std::optional<std::string> ratios;  // with gpus: shares per device, "1,1.75"
  std::optional<std::uint32_t> context;  // KV cache tokens per sequence
  std::optional<std::string> kv_type;    // f16, q8_0 or f32
  std::optional<double> keep_alive_s;    // idle seconds before unload; 0: never
  std::optional<std::uint32_t> parallel; // sequences decoded together

  // These settings with each field `over` sets taken from `over`.
  model_settings overridden_by(const model_settings& over) const {
    model_settings m = *this;
    if (over.gpus) m.gpus = over.gpus;
    if (over.split) m.split = over.split;
    if (over.ratios) m.ratios = over.ratios;
    if (over.context) m.context = over.context;
    if (over.kv_type) m.kv_type = over.kv_type;
    if (over.keep_alive_s) m.keep_alive_s = over.keep_alive_s;
    if (over.parallel) m.parallel = over.parallel;
    return m;
  }
  bool operator==(const model_settings&) const = default;
};

// Bounds shared by the global keys, the table keys and the request fields.
inline constexpr std::uint32_t min_context = 16;
inline constexpr std::uint32_t max_context = 1u << 24;
inline constexpr std::uint32_t max_parallel = 256;
inline constexpr double max_keep_alive_s = 1e9;

inline bool valid_split(std::string_view s) { return s == "layer" || s == "tensor"; }
inline bool valid_kv_type(std::string_view s) { return s == "f16" || s == "q8_0" || s == "f32"; }

}  // namespace tandem::proto
