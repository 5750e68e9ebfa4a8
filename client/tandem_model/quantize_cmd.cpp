// `tandem-model quantize IN.gguf OUT.gguf TYPE`: converts a GGUF file to a llama.cpp file type,
// per tensor as llama-quantize does (see quant_mix.h), streaming one tensor at a time.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "cli_common.h"
#include "gguf/gguf_reader.h"
#include "gguf/gguf_writer.h"
#include "producers.h"
#include "quant/quant.h"
#include "quant_mix.h"
#include "row_work.h"

namespace tandem {
namespace {

struct quantize_options {
  std::string input, output, type;
  unsigned threads = 0;
  bool allow_requantize = false;
  bool pure = false;
  bool quiet = false;
};

std::string joined(const std::vector<std::string_view>& names) {
  std::string s;
  for (auto n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

bool is_block_type(ggml_type t) { return type_info(t).block_size > 1; }

// Block count from metadata, else from the highest blk.N in the tensor names.
mix_context model_context(const gguf_file& in) {
  std::vector<std::string> names;
  uint32_t max_layer = 0;
  for (const auto& t : in.tensors()) {
    names.push_back(t.name);
    unsigned n = 0;
    if (std::sscanf(t.name.c_str(), "blk.%u.", &n) == 1) max_layer = std::max(max_layer, n + 1);
  }
  uint32_t n_layer = max_layer, n_expert = 0;
  if (auto arch = in.get_string("general.architecture")) {
    if (auto v = in.get_uint(*arch + ".block_count"); v && *v <= 0xffffffffull)
      n_layer = static_cast<uint32_t>(*v);
    if (auto v = in.get_uint(*arch + ".expert_count"); v && *v <= 0xffffffffull)
      n_expert = static_cast<uint32_t>(*v);
  }
  return make_mix_context(names, n_layer, n_expert);
}

// The output type of one tensor, or a failure naming why it cannot be converted.
ggml_type plan_tensor(const gguf_tensor& t, const quant_target& target, const mix_context& ctx,
                      const quantize_options& o) {
  if (!is_quantizable(t.name, t.n_dims)) return t.type;
  const type_choice c = choose_type(target, t.name, t.dims[0], ctx, o.pure);
  if (c.type == t.type) return t.type;
  const std::string from(type_name(t.type)), to(type_name(c.type));
  if (!can_dequantize(t.type)) fail(t.name + ": cannot read type " + from + " in this build");
  if (!can_quantize(c.type)) fail(t.name + ": cannot write type " + to + " in this build");
  // Dequantizing (a block type to F32, F16 or BF16) is always allowed: F32 holds the values exactly,
  // F16 and BF16 round them far below the block format's own error. Only block to block is refused.
  if (is_block_type(t.type) && is_block_type(c.type) && !o.allow_requantize)
    fail(t.name + " is already " + from + "; requantizing it to " + to + " adds a second rounding and loses " +
         "quality. Pass --allow-requantize to do it anyway, or quantize from an F32, F16 or BF16 file");
  if (c.fallback && !o.quiet)
    std::fprintf(stderr, "note: %s: row of %llu is not a multiple of the block size; using %s\n",
                 t.name.c_str(), static_cast<unsigned long long>(t.dims[0]), to.c_str());
  return c.type;
}

void run_quantize(const quantize_options& o) {
  const auto target = find_target(o.type);
  if (!target) fail("unknown type '" + o.type + "' (known: " + joined(target_names()) + ")");
  auto in = gguf_file::open(o.input);
  if (!in) fail(in.message());
  std::error_code ec;
  if (std::filesystem::equivalent(o.input, o.output, ec))
    fail("output " + o.output + " is the input file; write to another path");

  gguf_writer w(in->alignment());
  for (const auto& kv : in->metadata()) w.set(kv.key, kv.value);
  w.set_u32("general.file_type", static_cast<uint32_t>(target->ftype));
  w.set_u32("general.quantization_version", 2);  // GGML_QNT_VERSION

  const mix_context ctx = model_context(*in);
  const unsigned threads = o.threads ? o.threads : default_threads();
  for (const auto& t : in->tensors()) {
    const ggml_type type = plan_tensor(t, *target, ctx, o);
    std::vector<uint64_t> dims(t.dims, t.dims + t.n_dims);
    status st = w.add_tensor(t.name, type, std::move(dims), convert_producer(t, type, threads));
    if (!st) fail(t.name + ": " + st.message());
  }
  write_with_progress(w, o.output, "quantize", o.quiet);
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto o = std::make_shared<quantize_options>();
  auto* cmd = app.add_subcommand("quantize", "Convert a GGUF file to another file type "
                                             "(llama.cpp's mixtures, e.g. Q4_K_M)");
  cmd->add_option("input", o->input, "Input GGUF file")->required();
  cmd->add_option("output", o->output, "Output GGUF file")->required();
  cmd->add_option("type", o->type, "File type: " + joined(target_names()))->required();
  cmd->add_option("--threads", o->threads, "Worker threads (default: all cores)");
  cmd->add_flag("--allow-requantize", o->allow_requantize,
                "Allow quantizing tensors that are already quantized to another block type "
                "(dequantizing to F32, F16 or BF16 needs no flag)");
  cmd->add_flag("--pure", o->pure, "No mixture: every 2-D weight gets the base type");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress output");
  cmd->callback([o] { run_quantize(*o); });
}

}  // namespace tandem
