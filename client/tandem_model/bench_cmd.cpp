// `tandem-model bench --model F.gguf -p 512,2048 -n 128 -r 3 [--kv f16|q8_0] [--devices 0,1 [--ratios R]]
// [--json] [--profile]`. Prefill test ppN: one
// forward of N tokens from an empty cache. Decode test tgN: N single-token forwards from an empty
// cache, greedy on the GPU. Decode is set against the device-to-device copy bandwidth ((weight bytes
// + recurrent state bytes read and written) per token × t/s), prefill against the cuBLAS fp16 GEMM
// rate (2·params·N + attention FLOPs + DeltaNet rule FLOPs).
#include "bench_cmd.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_common.h"
#include "model/model_desc.h"
#include "runtime/model_instance.h"

#ifdef TANDEM_HAVE_CUDA_BACKEND
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ceilings.h"
#include "backend/cuda/cuda_profile.h"
#endif

namespace tandem {
namespace {

struct bench_options {
  std::string model;
  std::vector<int> prompt = {512};
  std::vector<int> gen = {128};
  int reps = 3;
  int device = 0;
  std::string devices;     // several GPUs ("0,1", "0=16GiB,1=32GiB"): a split over them
  std::string split = "layer";
  std::string ratios;
  std::string kv = "f16";  // KV cache element type
  bool json = false;
  bool no_ceilings = false;
  bool profile = false;  // time each launch group of the decode tests (one GPU, no graphs)
};

#ifdef TANDEM_HAVE_CUDA_BACKEND

struct sample_stats {
  double mean = 0, sd = 0;
};

sample_stats stats_of(const std::vector<double>& v) {
  sample_stats s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  for (double x : v) s.sd += (x - s.mean) * (x - s.mean);
  s.sd = v.size() > 1 ? std::sqrt(s.sd / double(v.size() - 1)) : 0;
  return s;
}

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// One prefill of n random tokens (logits for the last only); returns seconds.
double run_prefill(cuda_backend_api& be, kv_cache& cache, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  batch b;
  for (int i = 0; i < n; ++i) b.add(int32_t(rng() % be.n_vocab()), 0, i, i + 1 == n);
  cache.clear(0);
  std::vector<int32_t> ids;
  const auto t0 = clock_type::now();
  auto s = be.forward_argmax(b, cache, ids);
  const double dt = seconds_since(t0);
  if (!s) fail(s.message());
  return dt;
}

// n greedy single-token steps from an empty cache; returns seconds.
double run_decode(cuda_backend_api& be, kv_cache& cache, int n, uint32_t seed) {
  cache.clear(0);
  batch b;
  b.add(int32_t(seed % be.n_vocab()), 0, 0, true);
  std::vector<int32_t> ids;
  const auto t0 = clock_type::now();
  for (int i = 0; i < n; ++i) {
    auto s = be.forward_argmax(b, cache, ids);
    if (!s) fail(s.message());
    b.clear();
    b.add(ids[0], 0, i + 1, true);
  }
  return seconds_since(t0);
}

// The backend under test: one GPU, or with --devices a layer or tensor split as the memory plan
// lays it out for this cache. split_text describes it ("none", "layer 13:23", "tensor kv 3:5 ffn
// 4352:7936"); first_device gets the
// device the ceilings are measured on.
std::unique_ptr<cuda_backend_api> open_backend(const bench_options& o, const model_desc& d, const kv_cache_config& cfg,
                                               std::string& split_text, int& first_device,
                                               cuda_step_profile* profile) {
  cuda_backend_options bo;
  bo.device = o.device;
  bo.profile = profile;
  split_text = "none";
  if (!o.devices.empty()) {
    auto sp = plan_gpu_split(d, o.devices, o.ratios, o.split == "none" ? "layer" : o.split, cfg);
    if (!sp) fail(sp.message());
    if (o.split == "none") {
      bo.device = sp->devices[0];
    } else {
      fill_cuda_options(*sp, bo);
      split_text = sp->describe();
    }
  }
  first_device = bo.devices.empty() ? bo.device : bo.devices[0];
  auto be = make_cuda_backend(d, bo);
  if (!be) fail(be.message());
  return std::move(*be);
}

struct model_counts {
  uint64_t file_bytes = 0, params = 0, matrix_params = 0;
};

model_counts count_model(const model_desc& d) {
  model_counts c;
  for (const gguf_tensor* t : {d.token_embd, d.output_norm}) c.file_bytes += t->n_bytes, c.params += t->n_elements;
  if (d.output != d.token_embd) c.file_bytes += d.output->n_bytes, c.params += d.output->n_elements;
  c.matrix_params += d.output->n_elements;
  for (const auto& l : d.layers)
    for (const gguf_tensor* t : {l.attn_norm, l.wq, l.wk, l.wv, l.bq, l.bk, l.bv, l.q_norm, l.k_norm, l.wo,
                                 l.dn_qkv, l.dn_gate, l.dn_conv, l.dn_dt_bias, l.dn_a, l.dn_beta, l.dn_alpha,
                                 l.dn_norm, l.dn_out, l.ffn_norm, l.ffn_gate, l.ffn_up, l.ffn_down}) {
      if (!t) continue;
      c.file_bytes += t->n_bytes, c.params += t->n_elements;
      if (t->n_dims == 2) c.matrix_params += t->n_elements;
    }
  return c;
}

// The profile of a decode test as table lines (microseconds per token by launch group) and JSON.
void profile_report(const cuda_step_profile& p, const std::string& test, int64_t tokens,
                    std::vector<std::string>& lines, nlohmann::json& json) {
  const auto rows = p.rows();
  double total = 0;
  for (const auto& r : rows) total += r.ms;
  char buf[256];
  std::snprintf(buf, sizeof buf, "\nprofile %s: %lld tokens, %.1f us per token in launch groups (graphs off, so launch "
                "gaps count)\n| %-26s | %11s | %9s | %6s |", test.c_str(), static_cast<long long>(tokens),
                1e3 * total / double(tokens), "group", "calls/token", "us/token", "share");
  lines.push_back(buf);
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& r : rows) {
    const double us = 1e3 * r.ms / double(tokens);
    std::snprintf(buf, sizeof buf, "| %-26s | %11.1f | %9.1f | %5.1f%% |", r.label.c_str(),
                  double(r.calls) / double(tokens), us, total > 0 ? 100 * r.ms / total : 0.0);
    lines.push_back(buf);
    groups.push_back({{"group", r.label}, {"calls_per_token", double(r.calls) / double(tokens)}, {"us_per_token", us}});
  }
  json[test] = groups;
}

// The lines above the table: device, split, upload rate, ceilings (when measured), bytes/token.
void print_preamble(const cuda_load_stats& ls, const std::string& split_text, const device_ceilings* ceil,
                    uint64_t bytes_per_token, uint64_t state_bytes_per_token) {
  std::printf("device: %s\n", ls.device_name.c_str());
  std::printf("split: %s\n", split_text.c_str());
  std::printf("upload: %.2f GB in %.2f s (%.2f GB/s through pinned staging)\n", ls.bytes / 1e9, ls.seconds,
              ls.bytes / ls.seconds / 1e9);
  if (ceil)
    std::printf("ceilings: copy %.0f GB/s (read+write, %zu MiB buffer), cuBLAS fp16 GEMM %.0f TFLOP/s (%d^3)\n",
                ceil->copy_gbps, ceil->copy_bytes >> 20, ceil->gemm_tflops, ceil->gemm_size);
  if (state_bytes_per_token > 0)
    std::printf("decode reads %.3f GB of weights and reads + writes %.3f GB of recurrent state per token\n\n",
                bytes_per_token / 1e9, state_bytes_per_token / 1e9);
  else
    std::printf("decode reads %.3f GB of weights per token\n\n", bytes_per_token / 1e9);
  std::printf("| %-28s | %13s | %10s | %-7s | %-4s | %7s | %20s | %-19s |\n", "model", "size", "params", "backend",
              "kv", "test", "t/s", "of ceiling");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(30, '-').c_str(), std::string(15, '-').c_str(),
              std::string(12, '-').c_str(), std::string(9, '-').c_str(), std::string(6, '-').c_str(),
              std::string(9, '-').c_str(), std::string(22, '-').c_str(), std::string(21, '-').c_str());
}

void run_bench(const bench_options& o) {
  auto lm = load_model(o.model);
  if (!lm) fail(lm.message());
  const model_desc& d = lm->desc;
  int max_ctx = 1;
  for (int p : o.prompt) max_ctx = std::max(max_ctx, p);
  for (int n : o.gen) max_ctx = std::max(max_ctx, n + 1);
  kv_cache_config cfg;
  cfg.n_ctx = uint32_t(max_ctx);
  cfg.type = o.kv == "q8_0" ? ggml_type::q8_0 : o.kv == "f32" ? ggml_type::f32 : ggml_type::f16;

  std::string split_text;
  int first_device = o.device;
  cuda_step_profile profile;  // outlives the backend, which records into it
  auto be = open_backend(o, d, cfg, split_text, first_device, o.profile ? &profile : nullptr);
  const auto& ls = be->load_stats();

  device_ceilings ceil;
  if (!o.no_ceilings) {
    auto c = measure_ceilings(first_device);
    if (!c) fail(c.message());
    ceil = *c;
  }
  const model_counts mc = count_model(d);
  const uint64_t file_bytes = mc.file_bytes, params = mc.params, matrix_params = mc.matrix_params;

  auto cache = be->make_cache(cfg);
  if (!cache) fail(cache.message());

  const std::string name = std::filesystem::path(o.model).filename().string();
  const auto& hp = d.hp;
  nlohmann::json results = nlohmann::json::array();
  std::vector<std::string> lines;
  char buf[512];
  // frac < 0: the ceiling was not measured (--no-ceilings); the column then says so.
  auto row = [&](const std::string& test, const std::vector<double>& tps, double frac, const char* frac_of) {
    const auto st = stats_of(tps);
    char share[32];
    if (frac >= 0) std::snprintf(share, sizeof share, "%5.1f%% of %-9s", 100 * frac, frac_of);
    else std::snprintf(share, sizeof share, "%-19s", "(no ceiling)");
    std::snprintf(buf, sizeof buf, "| %-28s | %9.2f GiB | %8.2f B | %-7s | %-4s | %7s | %10.2f ± %-7.2f | %s |",
                  name.substr(0, 28).c_str(), double(file_bytes) / (1ull << 30), double(params) / 1e9, "CUDA",
                  o.kv.c_str(), test.c_str(), st.mean, st.sd, share);
    lines.push_back(buf);
    results.push_back({{"model", name}, {"size_bytes", file_bytes}, {"params", params}, {"backend", "CUDA"},
                       {"kv_type", o.kv}, {"test", test}, {"t_per_s", st.mean}, {"t_per_s_sd", st.sd}, {"samples", tps},
                       {"ceiling_fraction", frac >= 0 ? nlohmann::json(frac) : nlohmann::json(nullptr)},
                       {"ceiling", frac_of}});
  };
  for (int p : o.prompt) {
    run_prefill(*be, **cache, p, 1);  // warm-up: cuBLAS heuristics, buffer growth
    std::vector<double> tps;
    for (int r = 0; r < o.reps; ++r) tps.push_back(p / run_prefill(*be, **cache, p, 2 + r));
    // Causal attention: Q·Kᵀ and P·V over p²/2 pairs per head and attention layer. The DeltaNet
    // rule: per token, head and state element a decay, Sᵀk, the update and Sᵀq (about 8 FLOPs).
    const delta_net_shape dn = delta_net_of(hp);
    const double flops = 2.0 * double(matrix_params) * p +
                         4.0 * hp.n_attention_layers() * double(hp.n_head) * hp.head_dim * double(p) * p / 2 +
                         8.0 * hp.n_delta_net_layers() * double(dn.ssm_state_floats()) * p;
    const double rate = flops / (p / stats_of(tps).mean) / 1e12;
    row("pp" + std::to_string(p), tps, ceil.gemm_tflops > 0 ? rate / ceil.gemm_tflops : -1, "fp16 GEMM");
  }
  std::vector<std::string> profile_lines;
  nlohmann::json profiles = nlohmann::json::object();
  for (int n : o.gen) {
    run_decode(*be, **cache, std::min(n, 8), 7);
    profile.reset();
    std::vector<double> tps;
    for (int r = 0; r < o.reps; ++r) tps.push_back(n / run_decode(*be, **cache, n, 11 + r));
    if (o.profile) profile_report(profile, "tg" + std::to_string(n), int64_t(n) * o.reps, profile_lines, profiles);
    const double bytes = double(be->weight_bytes_per_token() + be->state_bytes_per_token());
    const double gbps = bytes * stats_of(tps).mean / 1e9;
    row("tg" + std::to_string(n), tps, ceil.copy_gbps > 0 ? gbps / ceil.copy_gbps : -1, "copy BW");
  }

  if (o.json) {
    nlohmann::json j = {{"device", ls.device_name},
                        {"split", split_text},
                        {"upload", {{"bytes", ls.bytes}, {"seconds", ls.seconds}, {"gb_per_s", ls.bytes / ls.seconds / 1e9}}},
                        {"ceilings", {{"copy_gb_per_s", ceil.copy_gbps}, {"gemm_fp16_tflops", ceil.gemm_tflops}}},
                        {"weight_bytes_per_token", be->weight_bytes_per_token()},
                        {"state_bytes_per_token", be->state_bytes_per_token()},
                        {"results", results}};
    if (o.profile) j["profile"] = profiles;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  print_preamble(ls, split_text, o.no_ceilings ? nullptr : &ceil, be->weight_bytes_per_token(),
                 be->state_bytes_per_token());
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  for (const auto& l : profile_lines) std::printf("%s\n", l.c_str());
}

#else

void run_bench(const bench_options&) { fail("bench needs the CUDA backend; this build has none"); }

#endif

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<bench_options>();
  auto* cmd = app.add_subcommand("bench", "Prefill and decode throughput on the CUDA backend");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", o->prompt, "Prefill sizes (ppN tests), comma separated")->delimiter(',');
  cmd->add_option("-n,--gen", o->gen, "Decode lengths (tgN tests), comma separated")->delimiter(',');
  cmd->add_option("-r,--reps", o->reps, "Timed repetitions per test (after one warm-up)")->check(CLI::PositiveNumber);
  cmd->add_option("--device", o->device, "CUDA device index");
  cmd->add_option("--devices", o->devices,
                  "Several CUDA devices, e.g. 0,1 or 0=16GiB,1=32GiB (caps for the memory plan)");
  cmd->add_option("--split", o->split, "With --devices: layer (default), tensor (every layer cut, partial sums exchanged; TANDEM_CUDA_EXCHANGE=auto|peer|host|nccl) or none (the first device alone)");
  cmd->add_option("--ratios", o->ratios, "With --devices: layers per device in these proportions, e.g. 1,1.75");
  cmd->add_option("--kv", o->kv, "KV cache type: f16 (default), q8_0 or f32")
      ->check(CLI::IsMember({"f16", "q8_0", "f32"}));
  cmd->add_flag("--json", o->json, "Print JSON instead of the table");
  cmd->add_flag("--no-ceilings", o->no_ceilings, "Skip measuring the copy and GEMM ceilings");
  cmd->add_flag("--profile", o->profile,
                "After each tgN, microseconds per token by launch group (one GPU; CUDA graphs off, so its t/s "
                "are below the unprofiled ones)");
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace tandem
