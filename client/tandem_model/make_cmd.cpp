// `tandem-model make`: a random-weight model of a preset shape (normal, std 0.02; norm weights 1;
// DeltaNet conv kernels N(0, 0.25^2) and decays ssm_a = -uniform(0.5, 8); MoE routers N(0, 1/n_embd)),
// with llama.cpp's tensor names and metadata, written one tensor at a time (3-D expert tensors as
// n_expert·n_out rows of n_in).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "byte_vocab.h"
#include "cli_common.h"
#include "gguf/gguf_writer.h"
#include "model/arch_spec.h"
#include "presets.h"
#include "producers.h"
#include "quant/quant.h"
#include "quant_mix.h"
#include "row_work.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/vocab_gguf.h"

namespace tandem {
namespace {

struct make_options {
  std::string preset;
  std::string type = "F16";
  std::string output;
  std::string name;
  std::string tokenizer;
  uint64_t seed = 1;
  unsigned threads = 0;
  uint64_t row_pool = 0;  // 0: every row drawn; else rows copy one of this many drawn rows
  bool quiet = false;
  bool tied = false, untied = false;
  // Shape overrides; 0 keeps the preset's value.
  uint32_t n_vocab = 0, n_ctx = 0, n_embd = 0, n_layer = 0, n_ff = 0, n_head = 0, n_head_kv = 0,
           head_dim = 0, n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_ff_shexp = 0;
};

std::string joined(const std::vector<std::string_view>& names) {
  std::string s;
  for (auto n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

hparams apply_overrides(const make_options& o, const hparams& preset) {
  hparams hp = preset;
  auto set = [](uint32_t v, uint32_t& field) {
    if (v) field = v;
  };
  set(o.n_vocab, hp.n_vocab);
  set(o.n_ctx, hp.n_ctx_train);
  set(o.n_embd, hp.n_embd);
  set(o.n_layer, hp.n_layer);
  set(o.n_ff, hp.n_ff);
  set(o.n_head, hp.n_head);
  set(o.n_head_kv, hp.n_head_kv);
  set(o.head_dim, hp.head_dim);
  set(o.n_expert, hp.n_expert);
  set(o.n_expert_used, hp.n_expert_used);
  set(o.n_ff_exp, hp.n_ff_exp);
  set(o.n_ff_shexp, hp.n_ff_shexp);
  // The preset's rotary share of the head (all of it, or qwen35's quarter) carries over.
  hp.rope_dim = static_cast<uint32_t>(uint64_t(preset.rope_dim ? preset.rope_dim : preset.head_dim) * hp.head_dim /
                                      preset.head_dim) & ~1u;
  if (o.tied) hp.tied_output = true;
  if (o.untied) hp.tied_output = false;
  return hp;
}

void validate(const arch_spec& arch, const hparams& hp) {
  if (hp.n_head_kv == 0 || hp.n_head % hp.n_head_kv != 0)
    fail("--n-head (" + std::to_string(hp.n_head) + ") must be a multiple of --n-head-kv (" +
         std::to_string(hp.n_head_kv) + ")");
  if (hp.head_dim % 2 != 0) fail("--head-dim must be even (RoPE rotates pairs)");
  if (status st = check_hybrid_hparams(arch, hp); !st) fail(st.message());
  if (!arch.flags.moe && (hp.n_expert || hp.n_expert_used || hp.n_ff_exp || hp.n_ff_shexp))
    fail("the expert options apply to MoE presets only (" + std::string(arch.name) + " has no experts)");
  if (arch.flags.moe && !arch.flags.shared_expert && hp.n_ff_shexp)
    fail("--n-ff-shexp: " + std::string(arch.name) + " has no shared expert");
  if (status st = check_moe_hparams(arch, hp); !st) fail(st.message());
  uint32_t pairs = 0;
  for (uint32_t s : hp.rope_sections) pairs += s;
  if (pairs * 2 > hp.rope_dim)
    fail("the RoPE sections cover " + std::to_string(pairs * 2) + " dims, more than the " +
         std::to_string(hp.rope_dim) + " rotary dims (a smaller --head-dim?)");
}

// The tensor type under the target's rule; only matrices are converted: norms, biases, conv kernels
// and decays are F32 as the converter writes them.
ggml_type tensor_type(const quant_target& target, const tensor_spec& s, const mix_context& ctx,
                      bool quiet) {
  if (!role_is_matrix(s.role) || !is_quantizable(s.name, static_cast<uint32_t>(s.shape.size())))
    return ggml_type::f32;
  const type_choice c = choose_type(target, s.name, s.shape[0], ctx);
  if (c.fallback && !quiet)
    std::fprintf(stderr, "note: %s: row of %llu is not a multiple of the block size; using %s\n",
                 s.name.c_str(), static_cast<unsigned long long>(s.shape[0]),
                 std::string(type_name(c.type)).c_str());
  return c.type;
}

// A tokenizer.json's vocabulary padded to n_vocab with unused "[PAD<id>]" tokens, as llama.cpp's
// converter pads to the embedding rows. A larger vocabulary raises n_vocab unless --n-vocab fixed it.
tokenizer_vocab load_tokenizer(const make_options& o, hparams& hp) {
  auto v = vocab_from_hf_files(o.tokenizer);
  if (!v) fail(o.tokenizer + ": " + v.message());
  if (v->tokens.size() > 0x7fffffffu) fail(o.tokenizer + ": too many tokens");
  const auto n = static_cast<uint32_t>(v->tokens.size());
  if (n > hp.n_vocab) {
    if (o.n_vocab)
      fail("--n-vocab " + std::to_string(o.n_vocab) + " is smaller than the tokenizer's " +
           std::to_string(n) + " tokens");
    if (!o.quiet)
      std::fprintf(stderr, "note: n_vocab raised from %u to the tokenizer's %u tokens\n", hp.n_vocab, n);
    hp.n_vocab = n;
  }
  for (size_t id = v->tokens.size(); id < hp.n_vocab; ++id) {
    v->tokens.push_back("[PAD" + std::to_string(id) + "]");
    v->types.push_back(token_type::unused);
  }
  return std::move(*v);
}

// ssm_a = -A with A ~ uniform(0.5, 8): every state decays (g <= 0), at per-head rates spread
// like a trained model's; the numbers come from a hash of (seed, index), whatever the threads.
gguf_writer::producer decay_producer(uint64_t n, uint64_t seed) {
  return [n, seed](std::span<uint8_t> out) -> status {
    if (out.size() != n * sizeof(float)) return make_error("writer asked for ", out.size(), " bytes");
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      const float u = static_cast<float>(static_cast<double>(z >> 11) * 0x1p-53);
      const float v = -(0.5f + 7.5f * u);
      std::memcpy(out.data() + i * sizeof(float), &v, sizeof v);
    }
    return {};
  };
}

// The random contents of one tensor by its role.
gguf_writer::producer tensor_producer(const tensor_spec& s, ggml_type type, const make_options& o, unsigned threads) {
  uint64_t rows = 1;
  for (size_t d = 1; d < s.shape.size(); ++d) rows *= s.shape[d];
  const uint64_t seed = tensor_seed(o.seed, s.name);
  if (s.role == tensor_role::decay) return decay_producer(s.shape[0] * rows, seed);
  // A depthwise conv over K taps: std 0.25 keeps its outputs near its inputs' scale (K = 4). A router
  // row of std 1/sqrt(n_embd) gives logits of about unit scale on the normed input: routing that
  // varies between tokens, as a trained router's does, rather than near-uniform weights.
  float std_dev = s.role == tensor_role::conv ? 0.25f : 0.02f;
  if (s.role == tensor_role::router) std_dev = 1.f / std::sqrt(float(s.shape[0]));
  return random_producer(type, s.shape[0], rows, seed, std_dev, s.role == tensor_role::norm, threads, o.row_pool);
}

void run_make(const make_options& o) {
  const model_preset* preset = find_preset(o.preset);
  if (!preset) {
    std::vector<std::string_view> names;
    for (const auto& p : all_presets()) names.push_back(p.name);
    fail("unknown preset '" + o.preset + "' (known: " + joined(names) + ")");
  }
  const auto target = find_target(o.type);
  if (!target) fail("unknown type '" + o.type + "' (known: " + joined(target_names()) + ")");
  const arch_spec* arch = find_arch(preset->arch);
  if (!arch) fail("architecture '" + std::string(preset->arch) + "' is not in this build");
  hparams hp = apply_overrides(o, preset->hp);
  validate(*arch, hp);
  std::optional<tokenizer_vocab> hf_vocab;
  std::optional<byte_vocab> embedded;
  if (!o.tokenizer.empty()) {
    hf_vocab = load_tokenizer(o, hp);
  } else {
    auto v = make_byte_vocab(hp.n_vocab);
    if (!v) fail(v.message());
    embedded = std::move(*v);
  }

  gguf_writer w;
  write_hparams(*arch, hp, w);
  w.set_string("general.type", "model");
  w.set_string("general.name", o.name.empty() ? "tandem random " + o.preset : o.name);
  w.set_u32("general.file_type", static_cast<uint32_t>(target->ftype));
  w.set_u32("general.quantization_version", 2);  // GGML_QNT_VERSION, as llama.cpp writes it
  if (hf_vocab) write_vocab(w, *hf_vocab);
  else write_byte_vocab(*embedded, w);

  const auto specs = expected_tensors(*arch, hp);
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  const mix_context ctx = make_mix_context(names, hp.n_layer, hp.n_expert);
  const unsigned threads = o.threads ? o.threads : default_threads();
  for (const auto& s : specs) {
    const ggml_type type = tensor_type(*target, s, ctx, o.quiet);
    if (!can_quantize(type)) fail("this build cannot write tensors of type " + std::string(type_name(type)));
    status st = w.add_tensor(s.name, type, s.shape, tensor_producer(s, type, o, threads));
    if (!st) fail(s.name + ": " + st.message());
  }
  write_with_progress(w, o.output, "make", o.quiet);
}

}  // namespace

void add_make_command(CLI::App& app) {
  auto o = std::make_shared<make_options>();
  auto* cmd = app.add_subcommand("make", "Write a random-weight model of a preset shape");
  std::string presets;
  for (const auto& p : all_presets())
    presets += "\n  " + std::string(p.name) + ": " + std::string(p.description);
  cmd->add_option("--preset", o->preset, "Model shape:" + presets)->required();
  cmd->add_option("--type", o->type, "File type: " + joined(target_names()) + " (default F16)");
  cmd->add_option("-o,--output", o->output, "Output GGUF file")->required();
  cmd->add_option("--seed", o->seed, "Random seed (default 1); same seed, same bytes");
  cmd->add_option("--name", o->name, "general.name (default \"tandem random <preset>\")");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "Hugging Face tokenizer.json to embed (tokenizer_config.json beside it supplies "
                  "the chat template and special ids); default: a small byte-level vocabulary");
  cmd->add_option("--threads", o->threads, "Worker threads (default: all cores)");
  cmd->add_option("--row-pool", o->row_pool,
                  "Draw only this many rows per tensor and fill the rest with copies of them, picked by "
                  "a hash of the row index: minutes become seconds for large shapes; for throughput "
                  "benchmarks, where only shapes, types and bytes matter (default 0: every row drawn)");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress output");
  cmd->add_option("--n-vocab", o->n_vocab, "Override the vocabulary size")->check(CLI::PositiveNumber);
  cmd->add_option("--n-ctx", o->n_ctx, "Override context_length")->check(CLI::PositiveNumber);
  cmd->add_option("--n-embd", o->n_embd, "Override embedding_length")->check(CLI::PositiveNumber);
  cmd->add_option("--n-layer", o->n_layer, "Override block_count")->check(CLI::PositiveNumber);
  cmd->add_option("--n-ff", o->n_ff, "Override feed_forward_length")->check(CLI::PositiveNumber);
  cmd->add_option("--n-head", o->n_head, "Override attention.head_count")->check(CLI::PositiveNumber);
  cmd->add_option("--n-head-kv", o->n_head_kv, "Override attention.head_count_kv")->check(CLI::PositiveNumber);
  cmd->add_option("--head-dim", o->head_dim, "Override attention.key_length (head size)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--n-expert", o->n_expert, "MoE presets: override expert_count")->check(CLI::PositiveNumber);
  cmd->add_option("--n-expert-used", o->n_expert_used, "MoE presets: override expert_used_count (top-k)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--n-ff-exp", o->n_ff_exp, "MoE presets: override expert_feed_forward_length")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--n-ff-shexp", o->n_ff_shexp, "qwen35moe presets: override expert_shared_feed_forward_length")
      ->check(CLI::PositiveNumber);
  auto* tied = cmd->add_flag("--tied", o->tied, "No output.weight: the head reuses token_embd");
  cmd->add_flag("--untied", o->untied, "Write a separate output.weight")->excludes(tied);
  cmd->callback([o] { run_make(*o); });
}

}  // namespace tandem
