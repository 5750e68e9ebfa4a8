// Model instance construction: the CPU reference backend, or the CUDA backend where built.
#include "runtime/model_instance.h"

#include "backend/cpu/cpu_backend.h"
#include "plan/memory_plan.h"
#include "plan/plan_parse.h"
#ifdef TANDEM_HAVE_CUDA_BACKEND
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device_info.h"
#endif

namespace tandem {

std::string gpu_split::describe() const {
  std::string out = tensor ? "tensor kv" : "layer";
  auto list = [&out](const auto& v, auto f) {
    for (size_t i = 0; i < v.size(); ++i) {
      out += i ? ':' : ' ';
      out += std::to_string(f(v[i]));
    }
  };
  if (!tensor) {
    list(layers, [](uint32_t n) { return n; });
    return out;
  }
  list(kv_heads, [](const auto& r) { return r.second - r.first; });
  out += " ffn";
  list(ffn_columns, [](const auto& r) { return r.second - r.first; });
  return out;
}

namespace {

// The plan's view of the cache a backend will hold and of its largest forward pass.
plan_options plan_options_for(const kv_cache_config& cache, uint32_t n_batch) {
  plan_options po;
  po.n_batch = std::max<uint32_t>(1, n_batch);
  po.n_ctx = cache.n_ctx;
  po.n_seqs = cache.n_seq_max;
  po.n_kv_tokens = uint64_t{cache.n_blocks} * cache.block_size;
  po.kv_type = cache.type;
  po.block_size = cache.block_size;
  return po;
}

// The plan of the whole model and `cache` on `device` alone: what check_gpu_fit and
// pick_single_device both judge by.
result<memory_plan> single_device_plan(const model_desc& desc, const device_spec& device, const kv_cache_config& cache,
                                       uint32_t n_batch) {
  plan_options po = plan_options_for(cache, n_batch);
  po.devices = {device};
  return make_memory_plan(desc, po);
}

// "0,1" (sep ',') or "0+1": the CUDA ids of a device list, caps left out.
std::string cuda_ids(const std::vector<device_request>& reqs, char sep) {
  std::string out;
  for (const auto& rq : reqs) {
    if (!out.empty()) out += sep;
    out += std::to_string(rq.cuda_id);
  }
  return out;
}

#ifdef TANDEM_HAVE_CUDA_BACKEND
// The listed CUDA devices as the plan sees them: their memory now, their caps.
result<std::vector<device_spec>> query_devices(const std::vector<device_request>& reqs) {
  std::vector<device_spec> out;
  for (const auto& rq : reqs) {
    if (rq.cuda_id < 0) return make_error("--gpus: '", rq.text, "' is not a CUDA device id");
    auto mem = query_cuda_device_memory(rq.cuda_id);
    if (!mem) return mem.err();
    out.push_back(measured_device(rq, mem->name, mem->total_bytes, mem->free_bytes));
  }
  return out;
}
#endif

}  // namespace

status check_gpu_fit(const model_desc& desc, const device_spec& device, const kv_cache_config& cache,
                     uint32_t n_batch) {
  auto plan = single_device_plan(desc, device, cache, n_batch);
  if (!plan) return plan.err();
  if (plan->fits) return {};
  const device_usage& u = plan->usage.at(0);
  // The exact bytes first (what a script compares), then the plan's breakdown by category.
  return make_error("the model does not fit GPU ", device.name, ": it needs ", u.total, " bytes and ", u.available,
                    " are free for it; ", plan->reasons.empty() ? std::string() : plan->reasons[0]);
}

result<size_t> pick_single_device(const model_desc& desc, const std::vector<device_spec>& devices,
                                  const kv_cache_config& cache, uint32_t n_batch) {
  if (devices.empty()) return make_error("no GPUs given");
  size_t best = devices.size();
  uint64_t best_room = 0;
  std::string short_of;
  for (size_t i = 0; i < devices.size(); ++i) {
    auto plan = single_device_plan(desc, devices[i], cache, n_batch);
    if (!plan) return plan.err();
    const device_usage& u = plan->usage.at(0);
    if (!plan->fits) {
      short_of += (short_of.empty() ? "" : "; ") + devices[i].name + " is " + plan_bytes_text(u.shortfall) +
                  " short (it needs " + std::to_string(u.total) + " bytes, " + std::to_string(u.available) +
                  " are free for it)";
      continue;
    }
    const uint64_t room = u.available > u.total ? u.available - u.total : 0;
    if (best == devices.size() || room > best_room) best = i, best_room = room;
  }
  if (best == devices.size()) return make_error("the model fits none of these GPUs alone: ", short_of);
  return best;
}

result<gpu_split> plan_gpu_split(const model_desc& desc, const std::string& gpus, const std::string& ratios,
                                 const std::string& split, const kv_cache_config& cache, uint32_t n_batch) {
#ifdef TANDEM_HAVE_CUDA_BACKEND
  auto reqs = parse_device_list(gpus);
  if (!reqs) return make_error("--gpus: ", reqs.message());
  plan_options po = plan_options_for(cache, n_batch);
  auto mode = parse_split_mode(split.empty() ? "layer" : split);
  if (!mode) return make_error("--split: ", mode.message());
  if (*mode == split_mode::none) return make_error("--split none runs on one GPU: use --gpu N instead of --gpus");
  po.split = *mode;
  if (!ratios.empty()) {
    auto r = parse_ratio_list(ratios);
    if (!r) return make_error("--ratios: ", r.message());
    po.ratios = *r;
  }
  gpu_split out;
  out.tensor = *mode == split_mode::tensor;
  auto devices = query_devices(*reqs);
  if (!devices) return devices.err();
  po.devices = std::move(*devices);
  for (const auto& rq : *reqs) out.devices.push_back(rq.cuda_id);
  auto plan = make_memory_plan(desc, po);
  if (!plan) return plan.err();
  if (!plan->fits) {
    std::string why;
    for (const auto& r : plan->reasons) why += (why.empty() ? "" : "; ") + r;
    return make_error("the model does not fit these GPUs: ", why);
  }
  for (size_t d = 0; d < plan->shares.size(); ++d) {
    const auto& sh = plan->shares[d];
    if (!sh.used()) return make_error("the memory plan gives device ", out.devices[d],
                                      " no part of the model; drop it from --gpus or change --ratios");
    out.layers.push_back(sh.layer_end - sh.layer_begin);
    out.kv_heads.emplace_back(sh.kv_head_begin, sh.kv_head_end);
    out.ffn_columns.emplace_back(sh.ffn_begin, sh.ffn_end);
    if (sh.embeddings) out.lead = int(d);
  }
  if (!out.tensor)
    for (uint32_t n : out.layers)
      if (n == 0) return make_error("the memory plan gives a device no layers; drop it from --gpus or change --ratios");
  return out;
#else
  (void)desc, (void)ratios, (void)split, (void)cache, (void)n_batch;
  return make_error("GPUs ", gpus, " requested, but this build has no CUDA backend");
#endif
}

#ifdef TANDEM_HAVE_CUDA_BACKEND
void fill_cuda_options(const gpu_split& s, cuda_backend_options& co) {
  co.devices = s.devices;
  co.layers_per_device.clear();
  co.tensor_shares.clear();
  if (!s.tensor) {
    co.layers_per_device = s.layers;
    return;
  }
  for (size_t d = 0; d < s.devices.size(); ++d)
    co.tensor_shares.push_back({s.kv_heads[d].first, s.kv_heads[d].second, s.ffn_columns[d].first,
                                s.ffn_columns[d].second, int(d) == s.lead});
}
#endif

namespace {

// The backend opt asks for; make_backend wraps it with the load's progress.
result<std::unique_ptr<backend>> build_backend(const model_desc& desc, const instance_options& opt,
                                              const file_source& file) {
  if (!opt.gpus.empty()) {
    auto split = plan_gpu_split(desc, opt.gpus, opt.ratios, opt.split, opt.cache, opt.n_batch);
    if (!split) return split.err();
#ifdef TANDEM_HAVE_CUDA_BACKEND
    cuda_backend_options co;
    fill_cuda_options(*split, co);
    co.progress = opt.progress;
    co.file = file;
    auto be = make_cuda_backend(desc, co);
    if (!be) return be.err();
    return std::unique_ptr<backend>(std::move(be.value()));
#endif
  }
  if (opt.gpu < 0) {
    auto be = make_cpu_backend(desc, {.n_threads = opt.n_threads});
    if (!be) return be.err();
    return std::unique_ptr<backend>(std::move(be.value()));
  }
#ifdef TANDEM_HAVE_CUDA_BACKEND
  int n = cuda_backend_device_count();
  if (opt.gpu >= n) return make_error("GPU ", opt.gpu, " requested, but ", n, " CUDA device(s) are usable");
  // Refused before any allocation, as a split is: a failed cudaMalloc halfway through the weights
  // would say less, and later.
  auto mem = query_cuda_device_memory(opt.gpu);
  if (!mem) return mem.err();
  device_request rq;
  rq.cuda_id = opt.gpu;
  rq.text = std::to_string(opt.gpu);
  TANDEM_TRY(check_gpu_fit(desc, measured_device(rq, mem->name, mem->total_bytes, mem->free_bytes), opt.cache,
                               opt.n_batch));
  cuda_backend_options co;
  co.device = opt.gpu;
  co.progress = opt.progress;
  co.file = file;
  auto be = make_cuda_backend(desc, co);
  if (!be) return be.err();
  return std::unique_ptr<backend>(std::move(be.value()));
#else
  (void)file;
  return make_error("GPU ", opt.gpu, " requested, but this build has no CUDA backend");
#endif
}

}  // namespace

// Progress counts the file's tensor bytes: the GPU uploads add what they copy (a split's shards,
// the tied head once), the CPU backend reads the mapping in place; either way done ends at total.
result<std::unique_ptr<backend>> make_backend(const model_desc& desc, const instance_options& opt,
                                              const file_source& file) {
  const uint64_t total = model_tensor_bytes(desc);
  if (opt.progress) opt.progress->start(total);
  auto be = build_backend(desc, opt, file);
  if (be && opt.progress) opt.progress->done_bytes.store(total, std::memory_order_relaxed);
  return be;
}

namespace {

// A model that cannot be split yet, given several GPUs (what `--gpu auto` gives on a two-GPU
// machine), is served on the one it fits with the most room rather than refused: rewrites opt to
// that GPU and returns the note saying so; empty when opt stands as given.
result<std::string> fall_back_to_one_gpu(const model_desc& desc, instance_options& opt) {
  if (opt.gpus.empty() || !desc.arch) return std::string();
  const std::string why = split_unsupported(desc.arch->name, desc.hp);
  if (why.empty()) return std::string();
  auto reqs = parse_device_list(opt.gpus);
  if (!reqs) return make_error("--gpus: ", reqs.message());
  if (reqs->size() < 2) return std::string();
#ifdef TANDEM_HAVE_CUDA_BACKEND
  auto devices = query_devices(*reqs);
  if (!devices) return devices.err();
  auto pick = pick_single_device(desc, *devices, opt.cache, opt.n_batch);
  if (!pick) return make_error(why, ": ", pick.message());
  const int id = (*reqs)[*pick].cuda_id;
  std::string note = why + ": serving it on GPU " + std::to_string(id) + " of " + cuda_ids(*reqs, ',') +
                     " (the one it fits with the most room)";
  opt.gpus.clear();
  opt.ratios.clear();
  opt.split.clear();
  opt.gpu = id;
  return note;
#else
  return std::string();  // build_backend answers that this build has no CUDA backend
#endif
}

// "cpu", "cuda:1", or "cuda:0+1" for a split, from the options the backend was built with.
std::string placement_of(const instance_options& opt) {
  if (opt.gpus.empty()) return opt.gpu < 0 ? "cpu" : "cuda:" + std::to_string(opt.gpu);
  auto reqs = parse_device_list(opt.gpus);
  return "cuda:" + (reqs ? cuda_ids(*reqs, '+') : opt.gpus);
}

}  // namespace

result<std::unique_ptr<model_instance>> model_instance::open(const std::string& path,
                                                             instance_options opt) {
  auto m = load_model(path);
  if (!m) return m.err();
  auto inst = std::unique_ptr<model_instance>(new model_instance());
  inst->model_ = std::move(m.value());
  const uint32_t train = inst->model_.desc.hp.n_ctx_train;
  if (opt.cache.n_ctx == 0 || (opt.ctx_within_training && train > 0 && opt.cache.n_ctx > train))
    opt.cache.n_ctx = train;
  auto note = fall_back_to_one_gpu(inst->model_.desc, opt);
  if (!note) return note.err();
  auto be = make_backend(inst->model_.desc, opt, inst->model_.file->source());  // a split's memory plan sizes this cache
  if (!be) return be.err();
  inst->backend_ = std::move(be.value());
  inst->placement_ = placement_of(opt);
  inst->placement_note_ = std::move(*note);
  auto c = inst->backend_->make_cache(opt.cache);
  if (!c) return c.err();
  inst->cache_ = std::move(c.value());
  return inst;
}

}  // namespace tandem
