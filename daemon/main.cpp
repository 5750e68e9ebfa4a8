// tandemd: parse the configuration and run the server (tandemd(8)).
#include <cstdio>
#include <string>
#include <vector>

#include "config/daemon_config.h"
#include "log.h"
#include "registry/engine_model.h"
#include "server/server.h"

#ifdef TANDEM_HAVE_CUDA_BACKEND
#include "backend/cuda/cuda_backend.h"
#endif

int main(int argc, char** argv) {
  using namespace tandem::daemon;
  auto parsed = parse_config(argc, argv);
  if (parsed.exit_now) {
    std::fputs(parsed.output.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  auto& cfg = parsed.config;
  log_level lvl = log_level::info;
  parse_log_level(cfg.log_level, lvl);
  set_log_level(lvl);
  if (!cfg.config_file.empty()) log(log_level::info, "configuration from ", cfg.config_file);
  for (const auto& note : cfg.notes) log(log_level::notice, note);
  int devices = 0;
#ifdef TANDEM_HAVE_CUDA_BACKEND
  if (cfg.gpu == k_gpu_auto && cfg.gpus.empty()) devices = tandem::cuda_backend_device_count();
#endif
  if (auto chose = resolve_gpu_auto(cfg, devices); !chose.empty()) log(log_level::info, chose);

  engine_options eo;
  eo.gpu = cfg.gpu;
  eo.gpus = cfg.gpus;
  eo.ratios = cfg.ratios;
  eo.split = cfg.split;
  eo.threads = cfg.threads;
  eo.context = cfg.context;
  eo.parallel = cfg.parallel;
  eo.kv_tokens = cfg.kv_tokens;
  eo.kv_type = cfg.kv_type;
  eo.chat_format = cfg.chat_format;
  eo.prefill_chunk = cfg.prefill_chunk;
  eo.stall_timeout_s = cfg.stall_timeout;
  if (cfg.memory_budget > 0) log(log_level::info, "memory budget: ", cfg.memory_budget, " bytes");
  server s(cfg, std::vector<std::string>(argv, argv + argc), engine_loader(eo), engine_sizer(eo));
  return s.run();
}
