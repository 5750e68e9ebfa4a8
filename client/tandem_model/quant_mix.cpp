// The per-tensor type rule of llama.cpp's llama-quantize (src/llama-quant.cpp, llama_tensor_get_type)
// for the file types we can produce. Not reproduced: the Falcon and 70B special cases, imatrix
// variants, and the IQ/Q2_K/Q3_K types (this build cannot quantize to them).
#include "quant_mix.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>

namespace tandem {
namespace {

struct ftype_name {
  uint32_t id;
  std::string_view name;
};

// Every value of enum llama_ftype, so `info` can name files written by any llama.cpp version.
constexpr std::array<ftype_name, 35> k_ftype_names{{
    {0, "ALL_F32"},          {1, "MOSTLY_F16"},     {2, "MOSTLY_Q4_0"},
    {3, "MOSTLY_Q4_1"},      {4, "MOSTLY_Q4_1_SOME_F16"},
    {7, "MOSTLY_Q8_0"},      {8, "MOSTLY_Q5_0"},    {9, "MOSTLY_Q5_1"},
    {10, "MOSTLY_Q2_K"},     {11, "MOSTLY_Q3_K_S"}, {12, "MOSTLY_Q3_K_M"},
    {13, "MOSTLY_Q3_K_L"},   {14, "MOSTLY_Q4_K_S"}, {15, "MOSTLY_Q4_K_M"},
    {16, "MOSTLY_Q5_K_S"},   {17, "MOSTLY_Q5_K_M"}, {18, "MOSTLY_Q6_K"},
    {19, "MOSTLY_IQ2_XXS"},  {20, "MOSTLY_IQ2_XS"}, {21, "MOSTLY_Q2_K_S"},
    {22, "MOSTLY_IQ3_XS"},   {23, "MOSTLY_IQ3_XXS"}, {24, "MOSTLY_IQ1_S"},
    {25, "MOSTLY_IQ4_NL"},   {26, "MOSTLY_IQ3_S"},  {27, "MOSTLY_IQ3_M"},
    {28, "MOSTLY_IQ2_S"},    {29, "MOSTLY_IQ2_M"},  {30, "MOSTLY_IQ4_XS"},
    {31, "MOSTLY_IQ1_M"},    {32, "MOSTLY_BF16"},   {36, "MOSTLY_TQ1_0"},
    {37, "MOSTLY_TQ2_0"},    {38, "MOSTLY_MXFP4_MOE"}, {1024, "GUESSED"},
}};

constexpr std::array<quant_target, 13> k_targets{{
    {file_type::all_f32, "F32", ggml_type::f32},
    {file_type::mostly_f16, "F16", ggml_type::f16},
    {file_type::mostly_bf16, "BF16", ggml_type::bf16},
    {file_type::mostly_q8_0, "Q8_0", ggml_type::q8_0},
    {file_type::mostly_q6_k, "Q6_K", ggml_type::q6_k},
    {file_type::mostly_q5_k_m, "Q5_K_M", ggml_type::q5_k},
    {file_type::mostly_q5_k_s, "Q5_K_S", ggml_type::q5_k},
    {file_type::mostly_q5_1, "Q5_1", ggml_type::q5_1},
    {file_type::mostly_q5_0, "Q5_0", ggml_type::q5_0},
    {file_type::mostly_q4_k_m, "Q4_K_M", ggml_type::q4_k},
    {file_type::mostly_q4_k_s, "Q4_K_S", ggml_type::q4_k},
    {file_type::mostly_q4_1, "Q4_1", ggml_type::q4_1},
    {file_type::mostly_q4_0, "Q4_0", ggml_type::q4_0},
}};

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::toupper(static_cast<unsigned char>(x)) ==
                  std::toupper(static_cast<unsigned char>(y));
         });
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != s.npos; }
bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// llama.cpp's use_more_bits: the first and last eighth of the layers, and every third one between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool is_quantized(ggml_type t) { return type_info(t).block_size > 1; }

// The layer number of "blk.N.*", or -1.
int layer_of(std::string_view name) {
  if (name.substr(0, 4) != "blk.") return -1;
  int n = -1;
  auto [p, ec] = std::from_chars(name.data() + 4, name.data() + name.size(), n);
  if (ec != std::errc() || p == name.data() + name.size() || *p != '.') return -1;
  return n;
}

// llama.cpp counts attn_v tensors in layer order; in a dense model that is the layer number, in a
// hybrid one it is the tensor's rank among the layers that have attention.
int attn_v_rank(int layer, const mix_context& ctx) {
  auto it = std::lower_bound(ctx.attn_v_layers.begin(), ctx.attn_v_layers.end(), layer);
  return static_cast<int>(it - ctx.attn_v_layers.begin());
}

ggml_type mixture_type(const quant_target& tg, std::string_view name, uint64_t row,
                       const mix_context& ctx) {
  const file_type ft = tg.ftype;
  const int layer = layer_of(name);
  const bool k_m = ft == file_type::mostly_q4_k_m || ft == file_type::mostly_q5_k_m;
  const bool is_output = name == "output.weight" || (!ctx.has_output && name == "token_embd.weight");
  if (is_output) {
    // The output head is the most sensitive matrix: Q6_K unless the file is Q8_0.
    if (row % type_info(tg.base).block_size != 0) return ggml_type::q8_0;
    return tg.base == ggml_type::q8_0 ? ggml_type::q8_0 : ggml_type::q6_k;
  }
  if (name == "token_embd.weight") return tg.base;
  if (contains(name, "attn_v.weight")) {
    const int i = attn_v_rank(layer, ctx), n = static_cast<int>(ctx.attn_v_layers.size());
    ggml_type t = tg.base;
    if (k_m && use_more_bits(i, n)) t = ggml_type::q6_k;
    else if (ft == file_type::mostly_q4_k_s && i < 4) t = ggml_type::q5_k;
    if (ctx.n_expert == 8) t = ggml_type::q8_0;
    return t;
  }
  if (contains(name, "attn_k.weight")) return ctx.n_expert == 8 ? ggml_type::q8_0 : tg.base;
  if (contains(name, "ffn_down")) {
    const int n = static_cast<int>(ctx.n_layer);
    if (k_m && use_more_bits(layer, n)) return ggml_type::q6_k;
    if (ft == file_type::mostly_q4_k_s && layer < n / 8) return ggml_type::q5_k;
    return tg.base;
  }
  if (contains(name, "attn_output.weight")) {
    const bool q4_k = ft == file_type::mostly_q4_k_s || ft == file_type::mostly_q4_k_m;
    return ctx.n_expert == 8 && q4_k ? ggml_type::q5_k : tg.base;
  }
  if (contains(name, "attn_qkv.weight")) {
    if (ft == file_type::mostly_q4_k_m) return ggml_type::q5_k;
    if (ft == file_type::mostly_q5_k_m) return ggml_type::q6_k;
  }
  return tg.base;
}

}  // namespace

std::string file_type_name(uint32_t id) {
  for (const auto& f : k_ftype_names)
    if (f.id == id) return std::string(f.name);
  return "UNKNOWN_" + std::to_string(id);
}

std::optional<quant_target> find_target(std::string_view name) {
  if (iequal(name, "Q4_K")) name = "Q4_K_M";
  if (iequal(name, "Q5_K")) name = "Q5_K_M";
  for (const auto& t : k_targets)
    if (iequal(t.name, name)) return t;
  return std::nullopt;
}

std::vector<std::string_view> target_names() {
  std::vector<std::string_view> out;
  for (const auto& t : k_targets) out.push_back(t.name);
  return out;
}

mix_context make_mix_context(const std::vector<std::string>& tensor_names, uint32_t n_layer,
                             uint32_t n_expert) {
  mix_context ctx;
  ctx.n_layer = n_layer;
  ctx.n_expert = n_expert;
  for (const auto& name : tensor_names) {
    if (contains(name, "attn_v.weight") || contains(name, "attn_qkv.weight") ||
        contains(name, "attn_kv_b.weight"))
      ctx.attn_v_layers.push_back(layer_of(name));
    if (name == "output.weight") ctx.has_output = true;
  }
  std::sort(ctx.attn_v_layers.begin(), ctx.attn_v_layers.end());
  return ctx;
}

bool is_quantizable(std::string_view name, uint32_t n_dims) {
  return n_dims >= 2 && ends_with(name, "weight") && !contains(name, "_norm.weight") &&
         !contains(name, "ffn_gate_inp.weight") && !contains(name, "ssm_conv1d.weight");
}

type_choice choose_type(const quant_target& target, std::string_view name, uint64_t row,
                        const mix_context& ctx, bool pure) {
  // F32/F16/BF16 files are not mixtures: every quantizable tensor gets the base type.
  const bool mix = !pure && is_quantized(target.base);
  ggml_type t = mix ? mixture_type(target, name, row, ctx) : target.base;
  if (row % type_info(t).block_size == 0) return {t, false};
  // llama.cpp's fallbacks for rows that are not a multiple of 256, then F16 for anything left.
  switch (t) {
    case ggml_type::q4_k: t = ggml_type::q5_0; break;
    case ggml_type::q5_k: t = ggml_type::q5_1; break;
    case ggml_type::q6_k: t = ggml_type::q8_0; break;
    default: t = ggml_type::f16; break;
  }
  if (row % type_info(t).block_size != 0) t = ggml_type::f16;
  return {t, true};
}

}  // namespace tandem
