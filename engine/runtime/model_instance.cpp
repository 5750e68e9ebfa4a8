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

}  // namespace

status check_gpu_fit(const model_desc& desc, const device_spec& device, const kv_cache_config& cache,
                     uint32_t n_batch) {
  plan_options po = plan_options_for(cache, n_batch);
  po.devices = {device};
  auto plan = make_memory_plan(desc, po);
  if (!plan) return plan.err();
  if (plan->fits) return {};
  const device_usage& u = plan->usage.at(0);
  // The exact bytes first (what a script compares), then the plan's breakdown by category.
  return make_error("the model does not fit GPU ", device.name, ": it needs ", u.total, " bytes and ", u.available,
                    " are free for it; ", plan->reasons.empty() ? std::string() : plan->reasons[0]);
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
  for (const auto& rq : *reqs) {
    if (rq.cuda_id < 0) return make_error("--gpus: '", rq.text, "' is not a CUDA device id");
    auto mem = query_cuda_device_memory(rq.cuda_id);
    if (!mem) return mem.err();
    po.devices.push_back(measured_device(rq, mem->name, mem->total_bytes, mem->free_bytes));
    out.devices.push_back(rq.cuda_id);
  }
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
  (void)desc, (void)ratios, (void)split, (void)cache;
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

result<std::unique_ptr<model_instance>> model_instance::open(const std::string& path,
                                                             instance_options opt) {
  auto m = load_model(path);
  if (!m) return m.err();
  auto inst = std::unique_ptr<model_instance>(new model_instance());
  inst->model_ = std::move(m.value());
  const uint32_t train = inst->model_.desc.hp.n_ctx_train;
  if (opt.cache.n_ctx == 0 || (opt.ctx_within_training && train > 0 && opt.cache.n_ctx > train))
    opt.cache.n_ctx = train;
  auto be = make_backend(inst->model_.desc, opt, inst->model_.file->source());  // a split's memory plan sizes this cache
  if (!be) return be.err();
  inst->backend_ = std::move(be.value());
  auto c = inst->backend_->make_cache(opt.cache);
  if (!c) return c.err();
  inst->cache_ = std::move(c.value());
  return inst;
}

}  // namespace tandem
