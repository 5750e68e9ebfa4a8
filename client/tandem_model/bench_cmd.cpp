// `tandem-model bench --model F.gguf -p 512,2048 -n 128 -r 3 [-d 0,16384] [--ubatch 2048] [--kv f16|q8_0]
// [-b 1,16,64] [--devices 0,1 [--ratios R]] [--json] [--profile]`. At each depth D (llama-bench's -d; default 0)
// D tokens are first prefilled untimed and checkpointed; every repetition then starts from exactly
// that cache (truncate restores it, recurrent state included). Prefill test ppN: N tokens at
// positions D..D+N-1, in forwards of at most --ubatch tokens, each attending to what the previous
// ones wrote; t/s is N over the time of all of them. Decode test tgN: N single-token forwards from
// position D, greedy on the GPU; with batch B > 1 ("tgN bB"), B sequences (each prefilled to D)
// decode together, one token each per forward (the serving scheduler's decode pass), and t/s is
// B·N over the time. Decode is set against the device-to-device copy bandwidth ((weight
// bytes + recurrent state bytes read and written + the K/V rows attention reads) per token × t/s),
// prefill against the cuBLAS fp16 GEMM rate (2·params·N + attention FLOPs over D+i+1 keys for the
// i-th token + DeltaNet rule FLOPs). Weight bytes and params are the active ones
// (plan/active_weights.h): of a MoE model's routed experts only the k a token selects.
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
#include "plan/active_weights.h"
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
  std::vector<int> depth = {0};  // context already in the cache under each test (llama-bench -d)
  std::vector<int> batch = {1};  // sequences decoding together in the tgN tests
  int ubatch = 2048;             // most tokens per prefill forward
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
double prefill_chunks(cuda_backend_api& be, kv_cache& cache, int first, int n, int ubatch, uint32_t seed,
                      int seq = 0) {
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
double run_prefill(cuda_backend_api& be, kv_cache& cache, int depth, int n, int ubatch, uint32_t seed) {
  restore_depth(cache, depth);
  return prefill_chunks(be, cache, depth, n, ubatch, seed);
}

// n greedy steps of n_seq sequences (one token each per forward) on top of the depth's cache;
// returns seconds.
double run_decode(cuda_backend_api& be, kv_cache& cache, int depth, int n, int n_seq, uint32_t seed) {
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
  for (const auto& l : d.layers)
    for (const gguf_tensor* t : {l.attn_norm, l.wq, l.wk, l.wv, l.bq, l.bk, l.bv, l.q_norm, l.k_norm, l.wo,
                                 l.dn_qkv, l.dn_gate, l.dn_conv, l.dn_dt_bias, l.dn_a, l.dn_beta, l.dn_alpha,
                                 l.dn_norm, l.dn_out, l.ffn_norm, l.ffn_gate, l.ffn_up, l.ffn_down, l.ffn_gate_inp,
                                 l.ffn_gate_exps, l.ffn_up_exps, l.ffn_down_exps, l.ffn_gate_inp_shexp,
                                 l.ffn_gate_shexp, l.ffn_up_shexp, l.ffn_down_shexp})
      if (t) c.file_bytes += t->n_bytes, c.params += t->n_elements;
  // Prefill is rated on active FLOPs: a MoE token multiplies with k of its n experts only.
  c.matrix_params = active_per_token(d).params;
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

// The test column: "pp512", or at a depth "pp2048 @ d16384" as llama-bench writes it; a decode
// batch of B > 1 sequences adds " bB" ("tg128 b16").
std::string test_name(const char* kind, int n, int depth, int n_seq = 1) {
  std::string t = kind + std::to_string(n);
  if (n_seq > 1) t += " b" + std::to_string(n_seq);
  if (depth > 0) t += " @ d" + std::to_string(depth);
  return t;
}

// The lines above the table: device, split, upload rate, ceilings (when measured), bytes/token.
void print_preamble(const cuda_load_stats& ls, const std::string& split_text, const device_ceilings* ceil,
                    uint64_t bytes_per_token, uint64_t state_bytes_per_token, uint64_t kv_bytes_per_key,
                    int test_width) {
  std::printf("device: %s\n", ls.device_name.c_str());
  std::printf("split: %s\n", split_text.c_str());
  std::printf("upload: %.2f GB in %.2f s (%.2f GB/s through pinned staging)\n", ls.bytes / 1e9, ls.seconds,
              ls.bytes / ls.seconds / 1e9);
  if (ceil)
    std::printf("ceilings: copy %.0f GB/s (read+write, %zu MiB buffer), cuBLAS fp16 GEMM %.0f TFLOP/s (%d^3)\n",
                ceil->copy_gbps, ceil->copy_bytes >> 20, ceil->gemm_tflops, ceil->gemm_size);
  if (state_bytes_per_token > 0)
    std::printf("decode reads %.3f GB of weights and reads + writes %.3f GB of recurrent state per token",
                bytes_per_token / 1e9, state_bytes_per_token / 1e9);
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
  std::string name, kv;
  uint64_t file_bytes = 0, params = 0;
  int test_width = 7;
  std::vector<std::string> lines;
  nlohmann::json results = nlohmann::json::array();

  // frac < 0: the ceiling was not measured (--no-ceilings); the column then says so.
  void add(const std::string& test, int depth, const std::vector<double>& tps, double frac, const char* frac_of) {
    const auto st = stats_of(tps);
    char share[32], buf[512];
    if (frac >= 0) std::snprintf(share, sizeof share, "%5.1f%% of %-9s", 100 * frac, frac_of);
    else std::snprintf(share, sizeof share, "%-19s", "(no ceiling)");
    std::snprintf(buf, sizeof buf, "| %-28s | %9.2f GiB | %8.2f B | %-7s | %-4s | %*s | %10.2f ± %-7.2f | %s |",
                  name.substr(0, 28).c_str(), double(file_bytes) / (1ull << 30), double(params) / 1e9, "CUDA",
                  kv.c_str(), test_width, test.c_str(), st.mean, st.sd, share);
    lines.push_back(buf);
    results.push_back({{"model", name}, {"size_bytes", file_bytes}, {"params", params}, {"backend", "CUDA"},
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
  cuda_backend_api& be;
  kv_cache& cache;
  const device_ceilings& ceil;
  uint64_t matrix_params = 0;
  bench_table& table;
  cuda_step_profile& profile;
  std::vector<std::string> profile_lines;
  nlohmann::json profiles = nlohmann::json::object();
};

void run_prompt_test(bench_run& r, int depth, int p) {
  run_prefill(r.be, r.cache, depth, p, r.o.ubatch, 1);  // warm-up: cuBLAS heuristics, buffer growth
  std::vector<double> tps;
  for (int i = 0; i < r.o.reps; ++i) tps.push_back(p / run_prefill(r.be, r.cache, depth, p, r.o.ubatch, 2 + i));
  const double rate = prefill_flops(r.d.hp, r.matrix_params, depth, p) / (p / stats_of(tps).mean) / 1e12;
  r.table.add(test_name("pp", p, depth), depth, tps, r.ceil.gemm_tflops > 0 ? rate / r.ceil.gemm_tflops : -1,
              "fp16 GEMM");
}

// A batch's step reads the weights once and each sequence's K/V and state: its bytes per step
// over B tokens. Weight bytes count the dense ones (a MoE batch reads more experts than one
// token's k, so its share is a lower bound there).
void run_gen_test(bench_run& r, int depth, int n, int n_seq) {
  run_decode(r.be, r.cache, depth, std::min(n, 8), n_seq, 7);
  r.profile.reset();
  std::vector<double> tps;
  for (int i = 0; i < r.o.reps; ++i)
    tps.push_back(double(n) * n_seq / run_decode(r.be, r.cache, depth, n, n_seq, 11 + uint32_t(i)));
  const std::string test = test_name("tg", n, depth, n_seq);
  if (r.o.profile) profile_report(r.profile, test, int64_t(n) * n_seq * r.o.reps, r.profile_lines, r.profiles);
  // Step i attends to depth + i + 1 keys: on average depth + (n + 1) / 2 K/V rows per token.
  const double kv = double(kv_bytes_per_key(r.d.hp, r.cache.config().type)) * (depth + (n + 1) / 2.0);
  const double bytes =
      double(active_per_token(r.d).bytes) / n_seq + double(r.be.state_bytes_per_token()) + kv;
  const double gbps = bytes * stats_of(tps).mean / 1e9;
  r.table.add(test, depth, tps, r.ceil.copy_gbps > 0 ? gbps / r.ceil.copy_gbps : -1, "copy BW");
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

void print_json(const bench_options& o, const cuda_load_stats& ls, const std::string& split_text,
                const device_ceilings& ceil, cuda_backend_api& be, uint64_t kv_per_key, const bench_run& r) {
  nlohmann::json j = {{"device", ls.device_name},
                      {"split", split_text},
                      {"upload", {{"bytes", ls.bytes}, {"seconds", ls.seconds}, {"gb_per_s", ls.bytes / ls.seconds / 1e9}}},
                      {"ceilings", {{"copy_gb_per_s", ceil.copy_gbps}, {"gemm_fp16_tflops", ceil.gemm_tflops}}},
                      {"ubatch", o.ubatch},
                      {"weight_bytes_per_token", active_per_token(r.d).bytes},
                      {"state_bytes_per_token", be.state_bytes_per_token()},
                      {"kv_bytes_per_context_token", kv_per_key},
                      {"results", r.table.results}};
  if (o.profile) j["profile"] = r.profiles;
  std::printf("%s\n", j.dump(2).c_str());
}

void run_bench(const bench_options& o) {
  auto lm = load_model(o.model);
  if (!lm) fail(lm.message());
  const model_desc& d = lm->desc;
  const kv_cache_config cfg = cache_config(o);

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
  auto cache = be->make_cache(cfg);
  if (!cache) fail(cache.message());

  bench_table table;
  table.name = std::filesystem::path(o.model).filename().string();
  table.kv = o.kv;
  table.file_bytes = mc.file_bytes, table.params = mc.params;
  table.test_width = test_width(o);
  bench_run r{o, d, *be, **cache, ceil, mc.matrix_params, table, profile, {}, nlohmann::json::object()};
  for (int depth : o.depth) run_depth(r, depth);

  const uint64_t kv_per_key = kv_bytes_per_key(d.hp, cfg.type);
  if (o.json) return print_json(o, ls, split_text, ceil, *be, kv_per_key, r);
  print_preamble(ls, split_text, o.no_ceilings ? nullptr : &ceil, active_per_token(d).bytes,
                 be->state_bytes_per_token(), kv_per_key, table.test_width);
  for (const auto& l : table.lines) std::printf("%s\n", l.c_str());
  for (const auto& l : r.profile_lines) std::printf("%s\n", l.c_str());
}

#else

void run_bench(const bench_options&) { fail("bench needs the CUDA backend; this build has none"); }

#endif

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<bench_options>();
  auto* cmd = app.add_subcommand("bench", "Prefill and decode throughput on the CUDA backend");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", o->prompt, "Prefill sizes (ppN tests), comma separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("-n,--gen", o->gen, "Decode lengths (tgN tests), comma separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("-d,--depth", o->depth,
                  "Context depths, comma separated (as llama-bench -d): at depth D, D tokens are prefilled "
                  "untimed (in --ubatch chunks) before the tests, ppN then prefills positions D..D+N-1 and tgN "
                  "decodes from position D, both attending to those D tokens; the test column says e.g. "
                  "\"pp2048 @ d16384\". Default 0 (an empty cache)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-b,--batch", o->batch,
                  "Sequences decoding together in the tgN tests, comma separated (default 1): B sequences, "
                  "each prefilled to the depth, take one token each per forward, as the serving scheduler's "
                  "decode passes do; t/s is all B sequences' tokens over the time (\"tg128 b16\")")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("-u,--ubatch", o->ubatch,
                  "Most tokens per prefill forward: longer prompts and depths go in chunks of this many, each "
                  "attending to the cache the previous chunks wrote, so a 64k prompt needs no 64k-token "
                  "activations; ppN is N over the time of all its chunks. Default 2048, not llama-bench's 512: "
                  "the reference figures this bench is compared with were taken with batch 2048, and "
                  "2048-token GEMMs run nearer the fp16 ceiling")
      ->check(CLI::PositiveNumber);
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
