// `tandem-model bench --model F.gguf -p 512,2048 -n 128 -r 3 [-d 0,16384] [--ubatch 2048] [--kv f16|q8_0]
// [-b 1,16,64] [--device N | --devices 0,1 [--ratios R]] [--threads N] [--json] [--profile]`. At each
// depth D (llama-bench's -d; default 0) D tokens are first prefilled untimed and checkpointed; every
// repetition then starts from exactly that cache (truncate restores it, recurrent state included).
// Prefill test ppN: N tokens at positions D..D+N-1, in forwards of at most --ubatch tokens, each
// attending to what the previous ones wrote; t/s is N over the time of all of them. Decode test tgN:
// N single-token forwards from position D, greedy; with batch B > 1 ("tgN bB"), B sequences (each
// prefilled to D) decode together, one token each per forward (the serving scheduler's decode
// pass), and t/s is B·N over the time. Decode is set against the memory copy bandwidth ((weight
// bytes + recurrent state bytes read and written + the K/V rows attention reads) per token × t/s):
// the device-to-device copy on a GPU, a host memcpy over every backend thread on the CPU. Prefill is
// set against the cuBLAS fp16 GEMM rate on a GPU (2·params·N + attention FLOPs over D+i+1 keys for
// the i-th token + DeltaNet rule FLOPs); the CPU backend has no such ceiling measured. Weight bytes
// and params are the active ones (plan/active_weights.h): of a MoE model's routed experts only the k
// a token selects. The backend: CUDA device 0 when there is one, else the CPU backend (--device -1).
#include "bench_cmd.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "cli_common.h"
#include "model/model_desc.h"
#include "plan/active_weights.h"
#include "runtime/model_instance.h"

#ifdef TANDEM_HAVE_CUDA_BACKEND
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_ceilings.h"
#include "backend/cuda/cuda_profile.h"
#include "backend/cuda/cuda_upload.h"
#endif

namespace tandem {
namespace {

constexpr int k_auto_device = -2;  // --device not given: GPU 0 when there is one, else the CPU

struct bench_options {
  std::string model;
  std::vector<int> prompt = {512};
  std::vector<int> gen = {128};
  std::vector<int> depth = {0};  // context already in the cache under each test (llama-bench -d)
  std::vector<int> batch = {1};  // sequences decoding together in the tgN tests
  int ubatch = 2048;             // most tokens per prefill forward
  int reps = 3;
  int device = k_auto_device;    // -1: the CPU backend
  unsigned threads = 0;          // CPU backend threads (0: all cores)
  std::string devices;     // several GPUs ("0,1", "0=16GiB,1=32GiB"): a split over them
  std::string split = "layer";
  std::string ratios;
  std::string kv = "f16";  // KV cache element type
  bool json = false;
  bool no_ceilings = false;
  bool profile = false;  // time each launch group of the tests (one GPU, no graphs)
};

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

// Brings sequences 0 .. n_seq-1 back to the depth's cache: the first `depth` tokens, the
// recurrent state as checkpointed after them (depth 0: empty).
void restore_depth(kv_cache& cache, int depth, int n_seq = 1) {
  for (int s = 0; s < n_seq; ++s)
    if (cache.truncate(s, uint32_t(depth)) != uint32_t(depth))
      fail("bench: the cache could not be brought back to depth " + std::to_string(depth));
}

// Appends n random tokens to sequence seq at positions first..first+n-1 in forwards of at most
// ubatch tokens, each attending to the cache the previous ones wrote (logits for the very last
// token only); returns seconds over all of them.
double prefill_chunks(backend& be, kv_cache& cache, int first, int n, int ubatch, uint32_t seed, int seq = 0) {
  std::mt19937 rng(seed);
  std::vector<int32_t> tokens(size_t(std::max(n, 0)));
  for (auto& t : tokens) t = int32_t(rng() % be.n_vocab());
  batch b;
  std::vector<int32_t> ids;
  const auto t0 = clock_type::now();
  for (int c0 = 0; c0 < n; c0 += ubatch) {
    const int m = std::min(ubatch, n - c0);
    b.clear();
    for (int i = c0; i < c0 + m; ++i) b.add(tokens[size_t(i)], seq, first + i, i + 1 == n);
    auto s = be.forward_argmax(b, cache, ids);
    if (!s) fail(s.message());
  }
  return seconds_since(t0);
}

// Prefill test: n random tokens on top of the depth's cache; returns seconds.
double run_prefill(backend& be, kv_cache& cache, int depth, int n, int ubatch, uint32_t seed) {
  restore_depth(cache, depth);
  return prefill_chunks(be, cache, depth, n, ubatch, seed);
}

// n greedy steps of n_seq sequences (one token each per forward) on top of the depth's cache;
// returns seconds.
double run_decode(backend& be, kv_cache& cache, int depth, int n, int n_seq, uint32_t seed) {
  restore_depth(cache, depth, n_seq);
  batch b;
  for (int s = 0; s < n_seq; ++s) b.add(int32_t((seed + 7919u * uint32_t(s)) % be.n_vocab()), s, depth, true);
  std::vector<int32_t> ids;
  const auto t0 = clock_type::now();
  for (int i = 0; i < n; ++i) {
    auto st = be.forward_argmax(b, cache, ids);
    if (!st) fail(st.message());
    b.clear();
    for (int s = 0; s < n_seq; ++s) b.add(ids[size_t(s)], s, depth + i + 1, true);
  }
  return seconds_since(t0);
}

struct model_counts {
  uint64_t file_bytes = 0, params = 0, matrix_params = 0;
};

model_counts count_model(const model_desc& d) {
  model_counts c;
  for (const gguf_tensor* t : model_tensors(d)) c.file_bytes += t->n_bytes, c.params += t->n_elements;
  // Prefill is rated on active FLOPs: a MoE token multiplies with k of its n experts only.
  c.matrix_params = active_per_token(d).params;
  return c;
}

// The test column: "pp512", or at a depth "pp2048 @ d16384" as llama-bench writes it; a decode
// batch of B > 1 sequences adds " bB" ("tg128 b16").
std::string test_name(const char* kind, int n, int depth, int n_seq = 1) {
  std::string t = kind + std::to_string(n);
  if (n_seq > 1) t += " b" + std::to_string(n_seq);
  if (depth > 0) t += " @ d" + std::to_string(depth);
  return t;
}

// What the backend under test is and the ceilings its rates are set against (0: not measured).
struct bench_target {
  std::string backend_name;  // the table's backend column: "CUDA" or "CPU"
  std::string device;        // "NVIDIA H200 (sm_90, 139.8 GiB)", "AMD EPYC 7B13 (2 threads)"
  std::string split = "none";
  std::vector<std::string> info;  // lines after device and split (upload rate, threads)
  double copy_gbps = 0, gemm_tflops = 0;
  std::string ceilings_line;      // empty: not measured
  uint64_t state_bytes_per_token = 0;
  nlohmann::json json = nlohmann::json::object();  // backend-specific JSON fields
  // The tests' launch-group profile (CUDA --profile): reset before, report after each test.
  std::function<void()> profile_reset;
  std::function<void(const std::string& test, int64_t tokens, std::vector<std::string>& lines,
                     nlohmann::json& json)> profile_report;
};

// The lines above the table: device, split, upload rate or threads, ceilings (when measured),
// bytes/token.
void print_preamble(const bench_target& t, uint64_t bytes_per_token, uint64_t kv_bytes_per_key, int test_width) {
  std::printf("device: %s\n", t.device.c_str());
  std::printf("split: %s\n", t.split.c_str());
  for (const auto& l : t.info) std::printf("%s\n", l.c_str());
  if (!t.ceilings_line.empty()) std::printf("%s\n", t.ceilings_line.c_str());
  if (t.state_bytes_per_token > 0)
    std::printf("decode reads %.3f GB of weights and reads + writes %.3f GB of recurrent state per token",
                bytes_per_token / 1e9, t.state_bytes_per_token / 1e9);
  else
    std::printf("decode reads %.3f GB of weights per token", bytes_per_token / 1e9);
  std::printf(", plus %.1f KiB of K/V per token of context\n\n", kv_bytes_per_key / 1024.0);
  const int w = test_width;
  std::printf("| %-28s | %13s | %10s | %-7s | %-4s | %*s | %20s | %-19s |\n", "model", "size", "params", "backend",
              "kv", w, "test", "t/s", "of ceiling");
  std::printf("|%s|%s|%s|%s|%s|%s|%s|%s|\n", std::string(30, '-').c_str(), std::string(15, '-').c_str(),
              std::string(12, '-').c_str(), std::string(9, '-').c_str(), std::string(6, '-').c_str(),
              std::string(size_t(w) + 2, '-').c_str(), std::string(22, '-').c_str(), std::string(21, '-').c_str());
}

// The table's rows and the JSON results, as the tests add them.
struct bench_table {
  std::string name, kv, backend_name;
  uint64_t file_bytes = 0, params = 0;
  int test_width = 7;
  std::vector<std::string> lines;
  nlohmann::json results = nlohmann::json::array();

  // frac < 0: the ceiling was not measured (--no-ceilings, or the CPU's prefill); the column then says so.
  void add(const std::string& test, int depth, const std::vector<double>& tps, double frac, const char* frac_of) {
    const auto st = stats_of(tps);
    char share[32], buf[512];
    if (frac >= 0) std::snprintf(share, sizeof share, "%5.1f%% of %-9s", 100 * frac, frac_of);
    else std::snprintf(share, sizeof share, "%-19s", "(no ceiling)");
    std::snprintf(buf, sizeof buf, "| %-28s | %9.2f GiB | %8.2f B | %-7s | %-4s | %*s | %10.2f ± %-7.2f | %s |",
                  name.substr(0, 28).c_str(), double(file_bytes) / (1ull << 30), double(params) / 1e9,
                  backend_name.c_str(), kv.c_str(), test_width, test.c_str(), st.mean, st.sd, share);
    lines.push_back(buf);
    results.push_back({{"model", name}, {"size_bytes", file_bytes}, {"params", params}, {"backend", backend_name},
                       {"kv_type", kv}, {"test", test}, {"depth", depth}, {"t_per_s", st.mean},
                       {"t_per_s_sd", st.sd}, {"samples", tps},
                       {"ceiling_fraction", frac >= 0 ? nlohmann::json(frac) : nlohmann::json(nullptr)},
                       {"ceiling", frac_of}});
  }
};

// Bytes of K and V one decode step reads per token of context: every attention layer's kv heads.
uint64_t kv_bytes_per_key(const hparams& hp, ggml_type kv_type) {
  const uint64_t row = row_bytes(kv_type, hp.head_dim).value_or(0);
  return 2 * uint64_t{hp.n_attention_layers()} * hp.n_head_kv * row;
}

// FLOPs of an n-token prefill on top of depth tokens. Causal attention: token i (position depth+i)
// runs Q·Kᵀ and P·V over depth+i+1 keys per head and attention layer, 4·head_dim FLOPs per key.
// The DeltaNet rule: per token, head and state element a decay, Sᵀk, the update and Sᵀq (about 8).
double prefill_flops(const hparams& hp, uint64_t matrix_params, int depth, int n) {
  const double keys = double(n) * depth + double(n) * (n + 1) / 2;
  const delta_net_shape dn = delta_net_of(hp);
  return 2.0 * double(matrix_params) * n + 4.0 * hp.n_attention_layers() * double(hp.n_head) * hp.head_dim * keys +
         8.0 * hp.n_delta_net_layers() * double(dn.ssm_state_floats()) * n;
}

// What the tests of one run share.
struct bench_run {
  const bench_options& o;
  const model_desc& d;
  backend& be;
  kv_cache& cache;
  const bench_target& target;
  uint64_t matrix_params = 0;
  bench_table& table;
  std::vector<std::string> profile_lines;
  nlohmann::json profiles = nlohmann::json::object();
};

void run_prompt_test(bench_run& r, int depth, int p) {
  run_prefill(r.be, r.cache, depth, p, r.o.ubatch, 1);  // warm-up: cuBLAS heuristics, buffer growth
  if (r.target.profile_reset) r.target.profile_reset();
  std::vector<double> tps;
  for (int i = 0; i < r.o.reps; ++i) tps.push_back(p / run_prefill(r.be, r.cache, depth, p, r.o.ubatch, 2 + i));
  if (r.target.profile_report)
    r.target.profile_report(test_name("pp", p, depth), int64_t(p) * r.o.reps, r.profile_lines, r.profiles);
  const double rate = prefill_flops(r.d.hp, r.matrix_params, depth, p) / (p / stats_of(tps).mean) / 1e12;
  const double ceil = r.target.gemm_tflops;
  r.table.add(test_name("pp", p, depth), depth, tps, ceil > 0 ? rate / ceil : -1, "fp16 GEMM");
}

// A batch's step reads the weights once and each sequence's K/V and state: its bytes per step
// over B tokens. Weight bytes count the dense ones (a MoE batch reads more experts than one
// token's k, so its share is a lower bound there).
void run_gen_test(bench_run& r, int depth, int n, int n_seq) {
  run_decode(r.be, r.cache, depth, std::min(n, 8), n_seq, 7);
  if (r.target.profile_reset) r.target.profile_reset();
  std::vector<double> tps;
  for (int i = 0; i < r.o.reps; ++i)
    tps.push_back(double(n) * n_seq / run_decode(r.be, r.cache, depth, n, n_seq, 11 + uint32_t(i)));
  const std::string test = test_name("tg", n, depth, n_seq);
  if (r.target.profile_report)
    r.target.profile_report(test, int64_t(n) * n_seq * r.o.reps, r.profile_lines, r.profiles);
  // Step i attends to depth + i + 1 keys: on average depth + (n + 1) / 2 K/V rows per token.
  const double kv = double(kv_bytes_per_key(r.d.hp, r.cache.config().type)) * (depth + (n + 1) / 2.0);
  const double bytes =
      double(active_per_token(r.d).bytes) / n_seq + double(r.target.state_bytes_per_token) + kv;
  const double gbps = bytes * stats_of(tps).mean / 1e9;
  const double ceil = r.target.copy_gbps;
  r.table.add(test, depth, tps, ceil > 0 ? gbps / ceil : -1, "copy BW");
}

// Every test at one depth: the depth's tokens prefilled untimed, in ubatch chunks, and
// checkpointed in every sequence a batch uses, so each repetition starts from the same cache.
void run_depth(bench_run& r, int depth) {
  const int n_seq = int(r.cache.config().n_seq_max);
  for (int s = 0; s < n_seq; ++s) {
    r.cache.clear(s);
    if (depth == 0) continue;
    const double sec = prefill_chunks(r.be, r.cache, 0, depth, r.o.ubatch, 100 + uint32_t(depth) + uint32_t(s), s);
    if (auto c = r.cache.checkpoint(s); !c) fail(c.message());
    if (s == 0) std::fprintf(stderr, "depth %d: prefilled in %.2f s (per sequence)\n", depth, sec);
  }
  for (int p : r.o.prompt) run_prompt_test(r, depth, p);
  for (int n : r.o.gen)
    for (int b : r.o.batch) run_gen_test(r, depth, n, b);
}

// The cache holds the deepest depth plus the longest test.
kv_cache_config cache_config(const bench_options& o) {
  int longest = 1, deepest = 0;
  for (int p : o.prompt) longest = std::max(longest, p);
  for (int n : o.gen) longest = std::max(longest, n + 1);
  for (int dd : o.depth) deepest = std::max(deepest, dd);
  kv_cache_config cfg;
  cfg.n_ctx = uint32_t(deepest) + uint32_t(longest);
  for (int b : o.batch) cfg.n_seq_max = std::max(cfg.n_seq_max, uint32_t(b));
  cfg.type = o.kv == "q8_0" ? ggml_type::q8_0 : o.kv == "f32" ? ggml_type::f32 : ggml_type::f16;
  return cfg;
}

// The widest test name, so the column lines up.
int test_width(const bench_options& o) {
  size_t w = 7;
  for (int dd : o.depth) {
    for (int p : o.prompt) w = std::max(w, test_name("pp", p, dd).size());
    for (int n : o.gen)
      for (int b : o.batch) w = std::max(w, test_name("tg", n, dd, b).size());
  }
  return int(w);
}

void print_json(const bench_options& o, const bench_target& t, uint64_t kv_per_key, const bench_run& r) {
  nlohmann::json j = {{"backend", t.backend_name},
                      {"device", t.device},
                      {"split", t.split},
                      {"ceilings", {{"copy_gb_per_s", t.copy_gbps > 0 ? nlohmann::json(t.copy_gbps) : nullptr},
                                    {"gemm_fp16_tflops", t.gemm_tflops > 0 ? nlohmann::json(t.gemm_tflops) : nullptr}}},
                      {"ubatch", o.ubatch},
                      {"weight_bytes_per_token", active_per_token(r.d).bytes},
                      {"state_bytes_per_token", t.state_bytes_per_token},
                      {"kv_bytes_per_context_token", kv_per_key},
                      {"results", r.table.results}};
  j.update(t.json);
  if (o.profile) j["profile"] = r.profiles;
  std::printf("%s\n", j.dump(2).c_str());
}

// ---- The CPU backend's target: the host's copy bandwidth over the backend's threads.

struct host_copy_rate {
  double gbps = 0;  // median, (read + write) bytes / s / 1e9
  size_t bytes = 0;
};

// Times `reps` copies of a `bytes` buffer after one warm-up, each split over `threads` threads
// (the CPU backend's mat-vecs read their weights the same way, a slice per thread).
host_copy_rate measure_host_copy(unsigned threads, size_t bytes = size_t{256} << 20, int reps = 5) {
  threads = std::max(1u, threads);
  std::vector<char> src(bytes), dst(bytes);
  const size_t slice = (bytes / threads + 63) / 64 * 64;
  auto parallel = [&](auto&& fn) {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      const size_t b = std::min(bytes, t * slice), e = std::min(bytes, b + slice);
      pool.emplace_back([&fn, b, e] { fn(b, e); });
    }
    for (auto& th : pool) th.join();
  };
  // First touch from the copying threads (pages land on their nodes), then warm up.
  parallel([&](size_t b, size_t e) {
    std::memset(src.data() + b, 1, e - b);
    std::memset(dst.data() + b, 0, e - b);
  });
  std::vector<double> secs;
  for (int i = 0; i <= reps; ++i) {
    const auto t0 = clock_type::now();
    parallel([&](size_t b, size_t e) { std::memcpy(dst.data() + b, src.data() + b, e - b); });
    if (i > 0) secs.push_back(seconds_since(t0));  // the first is the warm-up
  }
  std::sort(secs.begin(), secs.end());
  return {2.0 * double(bytes) / secs[secs.size() / 2] / 1e9, bytes};
}

// "AMD EPYC 7B13 64-Core Processor (2 threads)": /proc/cpuinfo's model name and the thread count.
std::string cpu_name(unsigned threads) {
  std::string name = "CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      name = line.substr(line.find(':') + 1);
      name.erase(0, name.find_first_not_of(" \t"));
      break;
    }
  return name + " (" + std::to_string(threads) + " thread" + (threads == 1 ? "" : "s") + ")";
}

// Recurrent state a decode token reads and writes: its sequence's conv inputs and S in every
// DeltaNet layer, once each (0 for attention-only models), as the CUDA backend counts it.
uint64_t recurrent_bytes_per_token(const hparams& hp) {
  const delta_net_shape dn = delta_net_of(hp);
  return 2 * uint64_t{hp.n_delta_net_layers()} * (dn.conv_state_floats() + dn.ssm_state_floats()) * sizeof(float);
}

std::unique_ptr<backend> open_cpu_target(const bench_options& o, const model_desc& d, bench_target& t) {
  if (!o.devices.empty()) fail("bench: --devices needs the CUDA backend (--device -1 is the CPU backend)");
  if (o.profile) fail("bench: --profile needs the CUDA backend");
  const unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  auto be = make_cpu_backend(d, {.n_threads = threads});
  if (!be) fail(be.message());
  t.backend_name = "CPU";
  t.device = cpu_name(threads);
  t.info.push_back("threads: " + std::to_string(threads) + " (the CPU backend computes from the mapped file)");
  t.json["threads"] = threads;
  t.state_bytes_per_token = recurrent_bytes_per_token(d.hp);
  if (!o.no_ceilings) {
    const host_copy_rate c = measure_host_copy(threads);
    t.copy_gbps = c.gbps;
    char buf[160];
    std::snprintf(buf, sizeof buf, "ceilings: host memory copy %.1f GB/s (read+write, %zu MiB buffer, %u threads)",
                  c.gbps, c.bytes >> 20, threads);
    t.ceilings_line = buf;
  }
  return std::move(*be);
}

#ifdef TANDEM_HAVE_CUDA_BACKEND

// The profile of a test as table lines (microseconds per token by launch group) and JSON.
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

// The CUDA backend under test: one GPU, or with --devices a layer or tensor split as the memory
// plan lays it out for this cache; its upload rate and (unless --no-ceilings) the first device's
// copy and GEMM ceilings.
std::unique_ptr<backend> open_cuda_target(const bench_options& o, const model_desc& d, const file_source& file,
                                          const kv_cache_config& cfg, bench_target& t, cuda_step_profile* profile) {
  cuda_backend_options bo;
  bo.device = std::max(o.device, 0);
  bo.profile = profile;
  bo.file = file;
  if (!o.devices.empty()) {
    auto sp = plan_gpu_split(d, o.devices, o.ratios, o.split == "none" ? "layer" : o.split, cfg,
                             uint32_t(o.ubatch));
    if (!sp) fail(sp.message());
    if (o.split == "none") {
      bo.device = sp->devices[0];
    } else {
      fill_cuda_options(*sp, bo);
      t.split = sp->describe();
    }
  }
  const int first_device = bo.devices.empty() ? bo.device : bo.devices[0];
  auto be = make_cuda_backend(d, bo);
  if (!be) fail(be.message());
  const cuda_load_stats& ls = (*be)->load_stats();
  t.backend_name = "CUDA";
  t.device = ls.device_name;
  char buf[256];
  std::snprintf(buf, sizeof buf, "upload: %.2f GB in %.2f s (%.2f GB/s, %d threads through pinned staging)",
                ls.bytes / 1e9, ls.seconds, ls.bytes / ls.seconds / 1e9, upload_threads(bo.upload_threads));
  t.info.push_back(buf);
  t.json["upload"] = {{"bytes", ls.bytes}, {"seconds", ls.seconds}, {"gb_per_s", ls.bytes / ls.seconds / 1e9}};
  t.state_bytes_per_token = (*be)->state_bytes_per_token();
  if (!o.no_ceilings) {
    auto c = measure_ceilings(first_device);
    if (!c) fail(c.message());
    t.copy_gbps = c->copy_gbps, t.gemm_tflops = c->gemm_tflops;
    std::snprintf(buf, sizeof buf, "ceilings: copy %.0f GB/s (read+write, %zu MiB buffer), cuBLAS fp16 GEMM %.0f "
                  "TFLOP/s (%d^3)", c->copy_gbps, c->copy_bytes >> 20, c->gemm_tflops, c->gemm_size);
    t.ceilings_line = buf;
  }
  if (profile) {
    t.profile_reset = [profile] { profile->reset(); };
    t.profile_report = [profile](const std::string& test, int64_t tokens, std::vector<std::string>& lines,
                                 nlohmann::json& json) { profile_report(*profile, test, tokens, lines, json); };
  }
  return std::unique_ptr<backend>(std::move(*be));
}

#endif

// GPU 0 when --device is not given and there is one, else the CPU backend (-1).
int resolve_device(const bench_options& o) {
#ifdef TANDEM_HAVE_CUDA_BACKEND
  if (o.device != k_auto_device) return o.device;
  if (!o.devices.empty() || cuda_backend_device_count() > 0) return 0;
  std::fprintf(stderr, "bench: no CUDA device; timing the CPU backend (--device -1)\n");
  return -1;
#else
  if (o.device >= 0 || !o.devices.empty())
    fail("bench: this build has no CUDA backend; leave out --device/--devices (or --device -1) for the CPU backend");
  return -1;
#endif
}

void run_bench(const bench_options& o) {
  auto lm = load_model(o.model);
  if (!lm) fail(lm.message());
  const model_desc& d = lm->desc;
  const kv_cache_config cfg = cache_config(o);

#ifdef TANDEM_HAVE_CUDA_BACKEND
  cuda_step_profile profile;  // outlives the backend, which records into it
#endif
  bench_target target;  // outlives the backend too: its profile hooks point at profile
  std::unique_ptr<backend> be;
  if (resolve_device(o) < 0) {
    be = open_cpu_target(o, d, target);
  } else {
#ifdef TANDEM_HAVE_CUDA_BACKEND
    be = open_cuda_target(o, d, lm->file->source(), cfg, target, o.profile ? &profile : nullptr);
#endif
  }
  const model_counts mc = count_model(d);
  auto cache = be->make_cache(cfg);
  if (!cache) fail(cache.message());

  bench_table table;
  table.name = std::filesystem::path(o.model).filename().string();
  table.kv = o.kv;
  table.backend_name = target.backend_name;
  table.file_bytes = mc.file_bytes, table.params = mc.params;
  table.test_width = test_width(o);
  bench_run r{o, d, *be, **cache, target, mc.matrix_params, table, {}, nlohmann::json::object()};
  for (int depth : o.depth) run_depth(r, depth);

  const uint64_t kv_per_key = kv_bytes_per_key(d.hp, cfg.type);
  if (o.json) return print_json(o, target, kv_per_key, r);
  print_preamble(target, active_per_token(d).bytes, kv_per_key, table.test_width);
  for (const auto& l : table.lines) std::printf("%s\n", l.c_str());
  for (const auto& l : r.profile_lines) std::printf("%s\n", l.c_str());
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<bench_options>();
  auto* cmd = app.add_subcommand("bench", "Prefill and decode throughput on the CUDA backend (GPU 0 by default), "
                                          "or on the CPU backend (--device -1, and without a GPU)");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  // CLI::PositiveNumber's message reads "not in range 0.000000 to 1.79e308": name the real range.
  const auto positive = CLI::Range(1, std::numeric_limits<int>::max());
  cmd->add_option("-p,--prompt", o->prompt, "Prefill sizes (ppN tests), comma separated; 0: none (as llama-bench)")
      ->delimiter(',')
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  cmd->add_option("-n,--gen", o->gen, "Decode lengths (tgN tests), comma separated; 0: none")
      ->delimiter(',')
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  cmd->add_option("-d,--depth", o->depth,
                  "Context depths, comma separated (as llama-bench -d): at depth D, D tokens are prefilled "
                  "untimed (in --ubatch chunks) before the tests, ppN then prefills positions D..D+N-1 and tgN "
                  "decodes from position D, both attending to those D tokens; the test column says e.g. "
                  "\"pp2048 @ d16384\". Default 0 (an empty cache)")
      ->delimiter(',')
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  cmd->add_option("-b,--batch", o->batch,
                  "Sequences decoding together in the tgN tests, comma separated (default 1): B sequences, "
                  "each prefilled to the depth, take one token each per forward, as the serving scheduler's "
                  "decode passes do; t/s is all B sequences' tokens over the time (\"tg128 b16\")")
      ->delimiter(',')
      ->check(positive);
  cmd->add_option("-u,--ubatch", o->ubatch,
                  "Most tokens per prefill forward: longer prompts and depths go in chunks of this many, each "
                  "attending to the cache the previous chunks wrote, so a 64k prompt needs no 64k-token "
                  "activations; ppN is N over the time of all its chunks. Default 2048, not llama-bench's 512: "
                  "the reference figures this bench is compared with were taken with batch 2048, and "
                  "2048-token GEMMs run nearer the fp16 ceiling")
      ->check(positive);
  cmd->add_option("-r,--reps", o->reps, "Timed repetitions per test (after one warm-up)")->check(positive);
  cmd->add_option("--device,--gpu", o->device,
                  "CUDA device index, or -1 for the CPU backend (default: 0 when there is a CUDA device, else -1)");
  cmd->add_option("-t,--threads", o->threads, "CPU backend threads (default: all cores)");
  cmd->add_option("--devices", o->devices,
                  "Several CUDA devices, e.g. 0,1 or 0=16GiB,1=32GiB (caps for the memory plan)");
  cmd->add_option("--split", o->split, "With --devices: layer (default), tensor (every layer cut, partial sums exchanged; TANDEM_CUDA_EXCHANGE=auto|peer|host|nccl) or none (the first device alone)");
  cmd->add_option("--ratios", o->ratios, "With --devices: layers per device in these proportions, e.g. 1,1.75");
  cmd->add_option("--kv", o->kv, "KV cache type: f16 (default), q8_0 or f32")
      ->check(CLI::IsMember({"f16", "q8_0", "f32"}));
  cmd->add_flag("--json", o->json, "Print JSON instead of the table");
  cmd->add_flag("--no-ceilings", o->no_ceilings, "Skip measuring the ceilings (GPU: copy and GEMM; CPU: host memory copy)");
  cmd->add_flag("--profile", o->profile,
                "After each ppN and tgN, microseconds per token by launch group (one GPU; CUDA graphs off, so its t/s "
                "are below the unprofiled ones)");
  cmd->callback([o] {
    // 0 in -p / -n asks for no such test (llama-bench's -p 0 for decode-only runs).
    for (auto* v : {&o->prompt, &o->gen}) v->erase(std::remove(v->begin(), v->end(), 0), v->end());
    run_bench(*o);
  });
}

}  // namespace tandem
