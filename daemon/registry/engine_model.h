// The adapter from served_model to the engine's serving session (engine/runtime/serving_session.h):
// one loaded model, its requests batched by the session's scheduler.
#pragma once

#include <map>
#include <string>

#include "registry/served_model.h"
#include "runtime/scheduler.h"

namespace tandem::daemon {

struct engine_options {
  int gpu = -1;                     // CUDA device to serve from; -1: the CPU backend
  std::string gpus, ratios;         // a split over several devices (instance_options)
  std::string split;                // with gpus: layer (default) or tensor
  unsigned threads = 0;             // CPU backend threads; 0: all cores
  std::uint32_t context = 4096;     // KV cache tokens per sequence (capped by the model's own)
  unsigned parallel = 4;            // sequences per model decoded together
  std::uint64_t kv_tokens = 0;      // KV pool token slots shared by them; 0: context × parallel
  std::string kv_type = "f16";      // KV cache element type: f16, q8_0 or f32
  std::string chat_format;          // empty: from the model's template
  // Prompt tokens per forward pass (beside one decode token per running sequence); cancel is
  // checked between passes.
  std::uint32_t prefill_chunk = k_default_chunk_tokens;
  double stall_timeout_s = 300;     // a forward pass longer than this makes the model unhealthy; 0: never
  // These options under a model's own settings. Its own gpus without ratios get the plan's
  // balance: the global ratios are shares of the global device list.
  engine_options with(const proto::model_settings& s) const;
};

// Loads `path` and everything needed to serve it. Errors name the step that failed. The engine
// reports the weight bytes it places to `progress` (when not null) while this runs.
result<std::unique_ptr<served_model>> load_engine_model(const std::string& path, const engine_options& opt,
                                                        load_progress* progress = nullptr);

// A loader bound to fixed global options, for the registry; each load's settings apply over them.
model_loader engine_loader(engine_options opt);

// The bytes load_engine_model would hold for `path` with these options: the session's
// footprint (the file plus the KV pool and recurrent state), from the header without loading.
result<std::uint64_t> engine_model_bytes(const std::string& path, const engine_options& opt);
model_sizer engine_sizer(engine_options opt);

}  // namespace tandem::daemon
