// `tandem-model plan (--model F.gguf | --preset NAME [--type T]) --devices SPEC [...]`: computes
// the memory plan without touching a GPU's memory (CUDA device ids only have their free memory
// read). A preset plans for a model shape that is not on disk, typed by llama.cpp's mixture rule.
// On named GPU models (v100-16gb, ...) the plan ends with the speed model's estimate.
#include "plan_cmd.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli_common.h"
#include "plan/memory_plan.h"
#include "plan/plan_parse.h"
#include "plan/plan_report.h"
#include "plan/shape_model.h"
#include "plan/speed_model.h"
#include "presets.h"
#include "quant_mix.h"

#ifdef TANDEM_HAVE_CUDA_BACKEND
#include "backend/cuda/cuda_device_info.h"
#endif

namespace tandem {
namespace {

struct plan_args {
  std::string model, preset, type = "Q4_K_M", devices, kv = "f16", split, ratios, margin = "256MiB";
  uint32_t ctx = 0, seqs = 1, batch = 512, logits = 0;
  int main_device = -1;
  bool json = false, tensors = false;
};

[[noreturn]] void usage_error(const std::string& option, const std::string& message) {
  throw CLI::ValidationError(option, message);
}

device_spec resolve(const device_request& r) {
  if (r.cuda_id < 0) return sized_device(r);
#ifdef TANDEM_HAVE_CUDA_BACKEND
  auto m = query_cuda_device_memory(r.cuda_id);
  if (!m) fail(m.message());
  return measured_device(r, m->name, m->total_bytes, m->free_bytes);
#else
  if (r.bytes == 0)
    usage_error("--devices", "device id " + std::to_string(r.cuda_id) +
                                 ": this build has no CUDA support to read its memory; give a cap (" +
                                 std::to_string(r.cuda_id) + "=16GiB) or a plain size (16GiB)");
  device_spec d = sized_device(r);
  d.cuda_id = r.cuda_id;
  d.name = "cuda:" + std::to_string(r.cuda_id) + " (cap only)";
  return d;
#endif
}

// The GPU model of each device, when every device is one (else empty). Their default ratios
// then balance by spec bandwidth instead of treating the devices as equally fast.
std::vector<const gpu_model*> named_models(const std::vector<device_request>& reqs, plan_options& o) {
  std::vector<const gpu_model*> gpus;
  for (const auto& r : reqs)
    if (r.gpu) gpus.push_back(r.gpu);
  if (gpus.size() != reqs.size()) return {};
  for (size_t d = 0; d < gpus.size(); ++d) o.devices[d].speed = gpus[d]->bandwidth / gpus[0]->bandwidth;
  return gpus;
}

plan_options options_from(const plan_args& a, std::vector<const gpu_model*>& gpus) {
  plan_options o;
  auto reqs = parse_device_list(a.devices);
  if (!reqs) usage_error("--devices", reqs.message());
  for (const auto& r : *reqs) o.devices.push_back(resolve(r));
  gpus = named_models(*reqs, o);
  auto kv = type_from_name(a.kv);
  if (!kv || (*kv != ggml_type::f16 && *kv != ggml_type::f32 && *kv != ggml_type::q8_0))
    usage_error("--kv", "unknown KV type '" + a.kv + "' (use f16, f32 or q8_0)");
  o.kv_type = *kv;
  o.split = o.devices.size() > 1 ? split_mode::layer : split_mode::none;
  if (!a.split.empty()) {
    auto s = parse_split_mode(a.split);
    if (!s) usage_error("--split", s.message());
    o.split = *s;
  }
  if (!a.ratios.empty()) {
    auto r = parse_ratio_list(a.ratios);
    if (!r) usage_error("--ratios", r.message());
    if (r->size() != o.devices.size())
      usage_error("--ratios", std::to_string(r->size()) + " ratios for " + std::to_string(o.devices.size()) +
                                  " devices");
    if (o.split == split_mode::none) usage_error("--ratios", "ratios need --split layer or --split tensor");
    o.ratios = *r;
  }
  if (a.main_device >= static_cast<int>(o.devices.size()))
    usage_error("--main-device", std::to_string(a.main_device) + " is not a position in --devices (0.." +
                                     std::to_string(o.devices.size() - 1) + ")");
  o.main_device = a.main_device;
  auto margin = parse_byte_size(a.margin);
  if (!margin) usage_error("--margin", margin.message());
  o.margin_bytes = *margin;
  o.n_ctx = a.ctx;
  o.n_seqs = a.seqs;
  o.n_batch = a.batch;
  o.n_logits = a.logits;
  return o;
}

// A preset shape typed by the file type's mixture rule (what `make --preset` would write).
std::unique_ptr<shape_model> preset_model(const std::string& name, const std::string& type) {
  const model_preset* p = find_preset(name);
  if (!p) {
    std::string known;
    for (const auto& q : all_presets()) {
      if (!known.empty()) known += ", ";
      known += q.name;
    }
    usage_error("--preset", "unknown preset '" + name + "' (known: " + known + ")");
  }
  const auto target = find_target(type);
  if (!target) usage_error("--type", "unknown file type '" + type + "'");
  const arch_spec* arch = find_arch(p->arch);
  if (!arch) fail("preset " + name + " names an unknown architecture");
  std::vector<std::string> names;
  for (const auto& s : expected_tensors(*arch, p->hp)) names.push_back(s.name);
  const mix_context ctx = make_mix_context(names, p->hp.n_layer, p->hp.n_expert);
  auto m = make_shape_model(p->arch, p->hp, [&](const tensor_spec& s) {
    if (!is_quantizable(s.name, static_cast<uint32_t>(s.shape.size()))) return ggml_type::f32;
    return choose_type(*target, s.name, s.shape[0], ctx).type;
  });
  if (!m) fail(m.message());
  return std::move(*m);
}

void run_plan(const plan_args& a) {
  if (a.model.empty() == a.preset.empty()) usage_error("--model", "give either --model FILE.gguf or --preset NAME");
  std::vector<const gpu_model*> gpus;
  plan_options o = options_from(a, gpus);
  loaded_model file_model;
  std::unique_ptr<shape_model> shape;
  const model_desc* desc = nullptr;
  if (!a.model.empty()) {
    auto m = load_model(a.model);
    if (!m) fail(m.message());
    file_model = std::move(*m);
    desc = &file_model.desc;
  } else {
    shape = preset_model(a.preset, a.type);
    desc = &shape->desc;
  }
  auto p = make_memory_plan(*desc, o);
  if (!p) fail(p.message());
  // No speed for a plan that does not fit: it would not run at all.
  std::optional<speed_estimate> speed;
  if (!gpus.empty() && p->fits) {
    auto e = estimate_speed(*desc, *p, gpus);
    if (!e) fail(e.message());
    speed = std::move(*e);
  }
  const speed_estimate* sp = speed ? &*speed : nullptr;
  const std::string out = a.json ? plan_to_json(*desc, *p, a.tensors, sp) : plan_to_text(*desc, *p, sp);
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  if (!p->fits) throw CLI::RuntimeError(k_plan_does_not_fit);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto a = std::make_shared<plan_args>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Memory plan of a model on a list of devices: bytes per device by category, whether it fits, why not; "
              "on named GPU models also the expected speed, a model (exit 0: fits, 3: does not fit, 2: bad usage)");
  cmd->add_option("-m,--model", a->model, "GGUF model file");
  cmd->add_option("--preset", a->preset, "Plan for a preset shape instead of a file (e.g. qwen3-32b)");
  cmd->add_option("--type", a->type, "File type of the preset's tensors (default Q4_K_M)");
  cmd->add_option("--devices", a->devices,
                  "CUDA ids with optional caps (0,1 or 0=16GiB,1=32GiB), sizes of devices not in this "
                  "machine (16GiB,32GiB), or GPU models not in this machine (" + gpu_model_names() +
                      "; v100-32gb=20GiB caps one); on GPU models alone the plan ends with an expected speed "
                      "(a model, not a measurement)")
      ->required();
  cmd->add_option("--ctx", a->ctx, "Context size per sequence (default: the model's training context)");
  cmd->add_option("--seqs", a->seqs, "Sequences the KV cache holds at full context (default 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", a->batch, "Most tokens per forward pass (default 512)")->check(CLI::PositiveNumber);
  cmd->add_option("--logits", a->logits, "Most logit rows per forward pass (default: one per sequence)");
  cmd->add_option("--kv", a->kv, "KV cache type: f16 (default), f32 or q8_0");
  cmd->add_option("--split", a->split, "none, layer or tensor (default: none for one device, layer for several)");
  cmd->add_option("--ratios", a->ratios, "Share per device, e.g. 1,1.75 (default: balance time within memory)");
  cmd->add_option("--main-device", a->main_device,
                  "Position in --devices of the device holding embeddings, output head and logits "
                  "(default: the one with the most memory)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--margin", a->margin, "Memory kept free on every device (default 256MiB)");
  cmd->add_flag("--json", a->json, "Print JSON instead of the table");
  cmd->add_flag("--tensors", a->tensors, "With --json: list every tensor's placement");
  cmd->callback([a] { run_plan(*a); });
}

}  // namespace tandem
