// Hugging Face → GGUF import: config.json to hparams, HF names to llama.cpp's, every tensor
// validated before the output is touched, then streaming conversion (Llama's q/k permuted; the
// qwen35 specifics live in hf_import_qwen35.cpp).
#include "convert/hf_import.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "convert/hf_import_detail.h"
#include "convert/safetensors.h"
#include "quant/quant.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/vocab_gguf.h"

namespace tandem {

namespace hf_detail {

status read_rope_theta(const config_reader& c, float& theta) {
  TANDEM_TRY(c.rope_type("rope_scaling"));
  TANDEM_TRY(c.rope_type("rope_parameters"));
  // Newer transformers move rope_theta into rope_parameters; older configs keep it at top level.
  if (const json* rp = c.get("rope_parameters")) {
    auto it = rp->find("rope_theta");
    if (it != rp->end() && !it->is_null())
      return c.positive_float(&*it, "rope_parameters.rope_theta", theta);
  }
  return c.positive_float(c.get("rope_theta"), "rope_theta", theta);
}

status check_silu(const config_reader& c) {
  if (const json* act = c.get("hidden_act")) {
    if (!act->is_string() || act->get<std::string>() != "silu")
      return make_error(c.label(), ": hidden_act is ", act->dump(), "; only \"silu\" is supported");
  }
  return {};
}

status read_size_fields(const config_reader& c, hparams& hp) {
  TANDEM_TRY(c.u32("vocab_size", hp.n_vocab, false));
  TANDEM_TRY(c.u32("hidden_size", hp.n_embd, false));
  TANDEM_TRY(c.u32("num_hidden_layers", hp.n_layer, false));
  TANDEM_TRY(c.u32("intermediate_size", hp.n_ff, false));
  TANDEM_TRY(c.u32("num_attention_heads", hp.n_head, false));
  TANDEM_TRY(c.u32("num_key_value_heads", hp.n_head_kv, false));
  TANDEM_TRY(c.u32("max_position_embeddings", hp.n_ctx_train, false));
  TANDEM_TRY(c.u32("head_dim", hp.head_dim, false));
  return {};
}

status read_norm_rope_tie(const config_reader& c, hparams& hp) {
  TANDEM_TRY(c.positive_float(c.get("rms_norm_eps"), "rms_norm_eps", hp.rms_eps));
  TANDEM_TRY(read_rope_theta(c, hp.rope_theta));
  TANDEM_TRY(c.boolean("tie_word_embeddings", hp.tied_output));
  return {};
}

status check_heads(const config_reader& c, hparams& hp) {
  const std::string& l = c.label();
  if (hp.n_head % hp.n_head_kv != 0)
    return make_error(l, ": num_attention_heads (", hp.n_head,
                      ") is not a multiple of num_key_value_heads (", hp.n_head_kv, ")");
  if (hp.head_dim == 0) {
    if (hp.n_embd % hp.n_head != 0)
      return make_error(l, ": hidden_size (", hp.n_embd,
                        ") is not a multiple of num_attention_heads (", hp.n_head,
                        ") and head_dim is missing");
    hp.head_dim = hp.n_embd / hp.n_head;
  }
  if (hp.head_dim % 2 != 0)
    return make_error(l, ": head_dim (", hp.head_dim, ") must be even for RoPE");
  hp.rope_dim = hp.head_dim;
  return {};
}

}  // namespace hf_detail

namespace {

using namespace hf_detail;

// Dense types map onto the llama.cpp architecture of the same name; the Qwen3.5 ones onto qwen35,
// qwen3_moe onto qwen3moe and the Qwen3.5 MoE ones onto qwen35moe.
constexpr std::string_view k_model_types[] = {"llama",    "qwen2",       "qwen3",           "qwen3_5_text",
                                              "qwen3_5",  "qwen3_moe",   "qwen3_5_moe_text", "qwen3_5_moe"};
bool is_qwen35_type(std::string_view t) { return t == "qwen3_5_text" || t == "qwen3_5"; }
bool is_qwen35moe_type(std::string_view t) { return t == "qwen3_5_moe_text" || t == "qwen3_5_moe"; }

// HF per-layer suffixes (after "model.layers.N.") and llama.cpp's per-layer stems.
constexpr hf_detail::layer_name k_layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

std::string join(const auto& items, std::string_view sep) {
  std::ostringstream os;
  bool first = true;
  for (const auto& s : items) {
    os << (first ? "" : sep) << s;
    first = false;
  }
  return os.str();
}

status check_unsupported(const config_reader& c, std::string_view model_type) {
  TANDEM_TRY(check_silu(c));
  TANDEM_TRY(c.refuse_true("use_sliding_window", "sliding-window attention is not supported"));
  if (const json* lt = c.get("layer_types")) {  // newer configs list each layer's attention kind
    if (!lt->is_array()) return make_error(c.label(), ": field layer_types must be an array");
    for (size_t i = 0; i < lt->size(); ++i)
      if ((*lt)[i] != "full_attention")
        return make_error(c.label(), ": layer_types[", i, "] is ", (*lt)[i].dump(),
                          "; only \"full_attention\" layers are supported");
  }
  TANDEM_TRY(c.refuse_true("mlp_bias", "the architecture has no FFN biases"));
  if (model_type != "qwen2")  // qwen2 always has q/k/v biases; llama and qwen3 have none here
    TANDEM_TRY(
        c.refuse_true("attention_bias", "the llama.cpp architecture has no attention biases"));
  return {};
}


// Applies the transform's value change to one row.
void map_values(tensor_transform::value_op op, float* row, uint64_t n) {
  if (op == tensor_transform::value_op::plus_one)
    for (uint64_t i = 0; i < n; ++i) row[i] += 1.f;
  if (op == tensor_transform::value_op::neg_exp)
    for (uint64_t i = 0; i < n; ++i) row[i] = -std::exp(row[i]);
}

// Source row `s` of a tensor's (stacked) source: part s / rows_per_part, row s % rows_per_part.
status read_source_row(const tensor_source& src, uint64_t rows_per_part, uint64_t s, uint64_t n_in, float* out) {
  const st_tensor* part = src.parts.size() == 1 ? src.parts[0] : src.parts[s / rows_per_part];
  const uint64_t r = src.parts.size() == 1 ? s : s % rows_per_part;
  return read_floats(*part, r * n_in, n_in, out);
}

// Element-wise conversion of one tensor into `out`, rows split over threads; each output row
// reads the source row (and columns) the transform names, then maps the values.
status convert_tensor(const tensor_source& src, ggml_type type, uint64_t n_in, uint64_t n_rows,
                      const tensor_transform& tf, unsigned threads, std::span<uint8_t> out) {
  const auto rb = row_bytes(type, n_in);
  if (!rb || out.size() != *rb * n_rows)
    return make_error("tensor \"", src.any()->name, "\": output buffer has ", out.size(),
                      " bytes, expected ", rb ? *rb * n_rows : 0);
  const uint64_t rows_per_part = n_rows / src.parts.size();
  auto work = [&](uint64_t r0, uint64_t r1) -> status {
    std::vector<float> row(n_in), in(tf.col_src.empty() ? 0 : n_in);
    for (uint64_t r = r0; r < r1; ++r) {
      const uint64_t s = tf.row_src.empty() ? r : tf.row_src[r];
      if (tf.col_src.empty()) {
        TANDEM_TRY(read_source_row(src, rows_per_part, s, n_in, row.data()));
      } else {
        TANDEM_TRY(read_source_row(src, rows_per_part, s, n_in, in.data()));
        for (uint64_t c = 0; c < n_in; ++c) row[c] = in[tf.col_src[c]];
      }
      map_values(tf.op, row.data(), n_in);
      quantize_row(type, row.data(), out.data() + r * *rb, static_cast<int64_t>(n_in));
    }
    return {};
  };
  // Threads pay off only for big tensors; small ones (norms, tiny test models) run inline.
  const uint64_t n_threads = std::min<uint64_t>({threads, n_rows, n_rows * n_in / (1u << 18) + 1});
  if (n_threads <= 1) return work(0, n_rows);
  std::vector<status> results(n_threads);
  std::vector<std::thread> pool;
  for (uint64_t t = 0; t < n_threads; ++t) {
    const uint64_t r0 = n_rows * t / n_threads, r1 = n_rows * (t + 1) / n_threads;
    pool.emplace_back([&, t, r0, r1] { results[t] = work(r0, r1); });
  }
  for (auto& th : pool) th.join();
  for (auto& r : results)
    if (!r) return r;
  return {};
}

std::string shape_string(const std::vector<uint64_t>& s) {
  std::string out(1, '[');  // not "[" + ...: GCC 12 warns falsely (-Wrestrict) on that
  out += join(s, ",");
  out += ']';
  return out;
}

// One output tensor: where it comes from and how it is stored.
struct planned_tensor {
  const tensor_spec* spec;
  tensor_source src;
  ggml_type type;
  tensor_transform transform;
};

using source_map = std::map<std::string, tensor_source>;

// Records that `t` supplies GGUF tensor `gguf` (whole, as half of a fused tensor, or as one expert
// of a stacked one); a second supplier of the same rows is an error naming both.
status add_source(source_map& m, const std::string& gguf, const st_tensor* t, int expert, uint32_t n_expert,
                  tensor_source::half h = tensor_source::half::none) {
  tensor_source& s = m[gguf];
  const bool taken = expert < 0 ? !s.parts.empty() : !s.parts.empty() && (!s.stacked || s.parts[expert]);
  if (taken)
    return make_error(*t->file, ": tensor \"", t->name, "\" supplies ", gguf, ", which \"", s.any()->name,
                      "\" already does (per-expert and fused experts mixed, or a duplicate)");
  if (expert < 0) {
    s.parts = {t};
    s.fused = h;
    return {};
  }
  if (s.parts.empty()) s.parts.assign(n_expert, nullptr), s.stacked = true;
  s.parts[expert] = t;
  return {};
}

// The GGUF name(s) one checkpoint tensor supplies, added to `by_gguf`.
status map_one(const hf_config& cfg, const st_tensor* t, source_map& by_gguf) {
  const bool qwen35 = cfg.arch->flags.hybrid;
  if (cfg.arch->flags.moe) {
    if (auto m = map_moe_tensor_name(t->name, cfg.hp.n_expert)) {
      if (!m->fused_gate_up) return add_source(by_gguf, m->gguf, t, m->expert, cfg.hp.n_expert);
      const std::string up = m->gguf.substr(0, m->gguf.size() - std::string_view("ffn_gate_exps.weight").size()) +
                             "ffn_up_exps.weight";
      TANDEM_TRY(add_source(by_gguf, m->gguf, t, -1, cfg.hp.n_expert, tensor_source::half::first));
      return add_source(by_gguf, up, t, -1, cfg.hp.n_expert, tensor_source::half::second);
    }
  }
  auto g = qwen35 ? map_qwen35_tensor_name(t->name) : map_hf_tensor_name(t->name);
  if (!g) return make_error(*t->file, ": tensor \"", t->name, "\" is not part of a ", cfg.model_type, " model");
  return add_source(by_gguf, *g, t, -1, cfg.hp.n_expert);
}

// GGUF name -> source for every tensor of the checkpoint that the model uses.
result<source_map> map_sources(const hf_config& cfg, const safetensors_model& model, import_summary& summary) {
  const bool qwen35 = cfg.arch->flags.hybrid;
  source_map by_gguf;
  size_t ignored = 0;
  for (const st_tensor* t : model.tensors()) {
    if (t->name.ends_with("rotary_emb.inv_freq"))
      continue;  // derived from rope_theta; llama.cpp drops it
    if (t->name == "lm_head.weight" && cfg.hp.tied_output) {
      summary.notes.push_back("tie_word_embeddings is set: lm_head.weight is ignored");
      continue;
    }
    if (qwen35 && qwen35_ignored_tensor(t->name)) {  // llama.cpp leaves these out of the text model
      ++ignored;
      continue;
    }
    TANDEM_TRY(map_one(cfg, t, by_gguf));
  }
  if (ignored)
    summary.notes.push_back(std::to_string(ignored) + " vision / multi-token-prediction tensors are not imported");
  return by_gguf;
}

// Source dims in GGUF order (contiguous first); a conv kernel [C, 1, K] is squeezed to {K, C}, the
// shared expert's gate [1, n_embd] to {n_embd}.
std::vector<uint64_t> gguf_dims(const st_tensor& src, const tensor_spec& spec) {
  const bool squeeze = spec.role == tensor_role::conv || (spec.role == tensor_role::router && spec.shape.size() == 1);
  std::vector<uint64_t> dims;
  for (auto it = src.shape.rbegin(); it != src.shape.rend(); ++it)
    if (*it != 1 || !squeeze) dims.push_back(*it);
  return dims;
}

status check_dtype(const st_tensor& t) {
  if (t.dtype != st_dtype::f32 && t.dtype != st_dtype::f16 && t.dtype != st_dtype::bf16 && t.dtype != st_dtype::f64)
    return make_error(*t.file, ": tensor \"", t.name, "\" has dtype ", st_dtype_name(t.dtype),
                      "; only floating-point weights can be imported");
  return {};
}

// The source's shape against the spec: each expert of a stacked tensor is one {n_in, n_out} matrix;
// a fused gate_up_proj has twice the rows of each half.
status check_source(const tensor_source& src, const tensor_spec& spec) {
  std::vector<uint64_t> want = spec.shape;
  if (src.stacked) want.pop_back();
  if (src.fused != tensor_source::half::none) want[1] *= 2;
  for (size_t e = 0; e < src.parts.size(); ++e) {
    const st_tensor* t = src.parts[e];
    if (!t)
      return make_error("missing tensor for expert ", e, " of ", spec.name, " (", src.any()->name,
                        " and the other experts are present)");
    if (gguf_dims(*t, spec) != want)
      return make_error(*t->file, ": tensor \"", t->name, "\" has shape ", shape_string(t->shape),
                        " but config.json implies ", shape_string(std::vector<uint64_t>(want.rbegin(), want.rend())));
    TANDEM_TRY(check_dtype(*t));
  }
  return {};
}

// A fused gate_up_proj's half: GGUF row e·F + j reads source row e·2F + j (gate) or + F (up).
std::vector<uint64_t> fused_rows(const tensor_spec& spec, tensor_source::half h) {
  const uint64_t F = spec.shape[1], E = spec.shape[2];
  std::vector<uint64_t> rows(E * F);
  for (uint64_t r = 0; r < E * F; ++r)
    rows[r] = r / F * 2 * F + r % F + (h == tensor_source::half::second ? F : 0);
  return rows;
}

// Maps every source tensor, checks names, shapes and dtypes against the architecture, and picks
// each tensor's output type. Nothing is written until this succeeds.
result<std::vector<planned_tensor>> plan_tensors(const hf_config& cfg,
                                                 const safetensors_model& model,
                                                 const std::vector<tensor_spec>& specs,
                                                 const import_options& opt,
                                                 import_summary& summary) {
  auto sources = map_sources(cfg, model, summary);
  if (!sources) return sources.err();
  auto& by_gguf = *sources;
  std::vector<planned_tensor> plan;
  for (const auto& spec : specs) {
    auto it = by_gguf.find(spec.name);
    if (it == by_gguf.end())
      return make_error("missing tensor for ", spec.name, " (", cfg.model_type, " with ",
                        cfg.hp.n_layer, " layers needs it)");
    planned_tensor p{&spec, std::move(it->second), ggml_type::f32, {}};
    by_gguf.erase(it);
    TANDEM_TRY(check_source(p.src, spec));
    if (role_is_matrix(spec.role)) {  // norms, biases, conv kernels, decays and routers stay F32
      p.type = opt.type;
      if (!row_bytes(p.type, spec.shape[0])) {
        p.type = ggml_type::f16;
        summary.notes.push_back(spec.name + ": row length " + std::to_string(spec.shape[0]) +
                                " is not a multiple of the " + std::string(type_name(opt.type)) +
                                " block size; stored as F16");
      }
    }
    if (cfg.arch->flags.hybrid) p.transform = qwen35_transform(spec, cfg.hp);
    if (p.src.fused != tensor_source::half::none) p.transform.row_src = fused_rows(spec, p.src.fused);
    const bool qk = spec.name.ends_with(".attn_q.weight") || spec.name.ends_with(".attn_k.weight");
    if (cfg.arch->flags.rope == rope_style::normal && qk) {
      p.transform.row_src.resize(spec.shape[1]);
      for (uint64_t r = 0; r < spec.shape[1]; ++r) p.transform.row_src[r] = llama_qk_source_row(r, cfg.hp.head_dim);
    }
    plan.push_back(std::move(p));
  }
  if (!by_gguf.empty()) {
    const st_tensor* extra = by_gguf.begin()->second.any();
    return make_error(*extra->file, ": tensor \"", extra->name, "\" (", by_gguf.begin()->first,
                      ") is not expected for ", cfg.model_type, " with ", cfg.hp.n_layer,
                      " layers");
  }
  return plan;
}

// Embeds DIR/tokenizer.json (+ tokenizer_config.json) when present; false when there is none.
// The token list is padded to the embedding rows as llama.cpp's converter does.
result<bool> add_tokenizer(const std::string& dir, uint32_t n_vocab, gguf_writer& w) {
  const std::string path = (std::filesystem::path(dir) / "tokenizer.json").string();
  if (!std::filesystem::exists(path)) return false;
  auto v = vocab_from_hf_files(path);
  if (!v) return make_error(path, ": ", v.message(), " (import without it: --no-tokenizer)");
  if (v->tokens.size() > n_vocab)
    return make_error(path, ": ", v->tokens.size(), " tokens but config.json's vocab_size is ",
                      n_vocab);
  for (size_t id = v->tokens.size(); id < n_vocab; ++id) {
    v->tokens.push_back("[PAD" + std::to_string(id) + "]");
    v->types.push_back(token_type::unused);
  }
  write_vocab(w, *v);
  return true;
}

}  // namespace

std::vector<std::string_view> supported_hf_model_types() {
  return {std::begin(k_model_types), std::end(k_model_types)};
}

result<hf_config> parse_hf_config(std::string_view json_text, const std::string& label) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return make_error(label, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) return make_error(label, ": not a JSON object");
  config_reader c(j, label);
  hf_config cfg;
  const json* mt = c.get("model_type");
  if (!mt || !mt->is_string()) return make_error(label, ": missing string field model_type");
  cfg.model_type = mt->get<std::string>();
  if (std::find(std::begin(k_model_types), std::end(k_model_types), cfg.model_type) ==
      std::end(k_model_types))
    return make_error(label, ": model_type \"", cfg.model_type,
                      "\" is not supported (supported: ", join(k_model_types, ", "), ")");
  if (is_qwen35_type(cfg.model_type)) return parse_qwen35_config(j, label);
  if (is_qwen35moe_type(cfg.model_type)) return parse_qwen35_config(j, label, true);
  if (cfg.model_type == "qwen3_moe") return parse_qwen3moe_config(j, label);
  cfg.arch = find_arch(cfg.model_type);
  if (!cfg.arch)
    return make_error("architecture ", cfg.model_type, " is not in the architecture table");

  hparams& hp = cfg.hp;
  TANDEM_TRY(check_unsupported(c, cfg.model_type));
  TANDEM_TRY(c.u32("vocab_size", hp.n_vocab, true));
  TANDEM_TRY(c.u32("hidden_size", hp.n_embd, true));
  TANDEM_TRY(c.u32("num_hidden_layers", hp.n_layer, true));
  TANDEM_TRY(c.u32("intermediate_size", hp.n_ff, true));
  TANDEM_TRY(c.u32("num_attention_heads", hp.n_head, true));
  TANDEM_TRY(c.u32("max_position_embeddings", hp.n_ctx_train, true));
  hp.n_head_kv = hp.n_head;  // transformers' default when num_key_value_heads is absent
  TANDEM_TRY(c.u32("num_key_value_heads", hp.n_head_kv, false));
  hp.head_dim = 0;
  TANDEM_TRY(c.u32("head_dim", hp.head_dim, false));
  TANDEM_TRY(hf_detail::check_heads(c, hp));
  // The defaults of all three transformers configs.
  hp.rms_eps = 1e-6f;
  hp.rope_theta = 10000.f;
  hp.tied_output = false;
  TANDEM_TRY(read_norm_rope_tie(c, hp));
  return cfg;
}

result<hf_config> read_hf_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(path, ": cannot open: ", std::strerror(errno),
                      " (is this a Hugging Face model directory?)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_hf_config(ss.str(), path);
}

std::optional<std::string> hf_detail::map_tensor_name(std::string_view n, std::span<const layer_name> layers) {
  if (n == "model.embed_tokens.weight") return "token_embd.weight";
  if (n == "model.norm.weight") return "output_norm.weight";
  if (n == "lm_head.weight") return "output.weight";
  constexpr std::string_view prefix = "model.layers.";
  if (!n.starts_with(prefix)) return std::nullopt;
  n.remove_prefix(prefix.size());
  const size_t dot = n.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 6) return std::nullopt;
  const std::string_view idx = n.substr(0, dot);
  if (!std::all_of(idx.begin(), idx.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) ||
      (idx.size() > 1 && idx[0] == '0'))
    return std::nullopt;
  const std::string_view rest = n.substr(dot + 1);
  for (const auto& ln : layers)
    if (ln.hf == rest) return "blk." + std::string(idx) + "." + std::string(ln.gguf);
  return std::nullopt;
}

std::optional<std::string> map_hf_tensor_name(std::string_view n) {
  return hf_detail::map_tensor_name(n, k_layer_names);
}

uint64_t llama_qk_source_row(uint64_t row, uint64_t head_dim) {
  const uint64_t head = row / head_dim, within = row % head_dim;
  const uint64_t i = within / 2, j = within % 2;
  return head * head_dim + j * (head_dim / 2) + i;
}

std::optional<uint32_t> llama_file_type(ggml_type t) {
  switch (t) {
    case ggml_type::f32:
      return 0;
    case ggml_type::f16:
      return 1;
    case ggml_type::q4_0:
      return 2;
    case ggml_type::q4_1:
      return 3;
    case ggml_type::q8_0:
      return 7;
    case ggml_type::q5_0:
      return 8;
    case ggml_type::q5_1:
      return 9;
    case ggml_type::q4_k:
      return 14;  // Q4_K_S: the "mostly Q4_K" mixture
    case ggml_type::q5_k:
      return 16;  // Q5_K_S
    case ggml_type::q6_k:
      return 18;
    case ggml_type::bf16:
      return 32;
    default:
      return std::nullopt;
  }
}

result<import_summary> import_hf_model(const std::string& dir, const std::string& out_path,
                                       const import_options& opt) {
  namespace fs = std::filesystem;
  const auto ftype = llama_file_type(opt.type);
  if (!can_quantize(opt.type) || !ftype)
    return make_error("output type ", type_name(opt.type), " cannot be produced by the importer");
  auto cfg = read_hf_config((fs::path(dir) / "config.json").string());
  if (!cfg) return cfg.err();
  auto model = safetensors_model::open_dir(dir);
  if (!model) return model.err();

  std::error_code ec;
  for (const auto& f : model->files())
    if (fs::equivalent(f.path(), out_path, ec))
      return make_error("output ", out_path, " is the input file ", f.path(),
                        "; write to another path");

  import_summary summary;
  summary.arch = std::string(cfg->arch->name);
  summary.hp = cfg->hp;
  const auto specs = expected_tensors(*cfg->arch, cfg->hp);
  auto plan = plan_tensors(*cfg, *model, specs, opt, summary);
  if (!plan) return plan.err();

  gguf_writer w;
  write_hparams(*cfg->arch, cfg->hp, w);
  std::string name = opt.name;
  if (name.empty()) name = fs::canonical(dir, ec).filename().string();  // also for "." and "dir/"
  w.set_string("general.name", name);
  w.set_u32("general.file_type", *ftype);
  w.set_u32("general.quantization_version", 2);
  if (opt.tokenizer) {
    auto tok = add_tokenizer(dir, cfg->hp.n_vocab, w);
    if (!tok) return tok.err();
    summary.has_tokenizer = *tok;
    if (!*tok) summary.notes.push_back("no tokenizer.json: the GGUF has no tokenizer");
  }

  const unsigned threads =
      opt.threads ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
  for (const auto& p : *plan) {
    const uint64_t n_in = p.spec->shape[0];
    uint64_t n_rows = 1;  // 3-D expert tensors: n_expert·n_out rows
    for (size_t d = 1; d < p.spec->shape.size(); ++d) n_rows *= p.spec->shape[d];
    TANDEM_TRY(w.add_tensor(
        p.spec->name, p.type, p.spec->shape, [&p, n_in, n_rows, threads](std::span<uint8_t> out) {
          return convert_tensor(p.src, p.type, n_in, n_rows, p.transform, threads, out);
        }));
  }
  summary.n_tensors = plan->size();
  summary.data_bytes = w.tensor_data_bytes();
  TANDEM_TRY(w.write(out_path, opt.progress));
  return summary;
}

}  // namespace tandem
