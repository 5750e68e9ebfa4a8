// Architectures described as data: each names its metadata keys, its tensors (with shapes derived from
// the hyperparameters) and its feature flags. The loader, `tandem-model make` and the importer all read
// these tables, so an architecture is added here and nowhere else.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace tandem {

class gguf_file;
class gguf_writer;

enum class rope_style { normal, neox };  // normal: rotate pairs (2i, 2i+1); neox: halves (i, i+d/2)

struct arch_flags {
  bool qk_norm = false;   // per-head RMSNorm on q and k before RoPE (qwen3)
  bool qkv_bias = false;  // biases on attn_q/k/v (qwen2)
  rope_style rope = rope_style::normal;
};

// Hyperparameters as llama.cpp names them under "<arch>." keys.
struct hparams {
  uint32_t n_vocab = 0;
  uint32_t n_ctx_train = 0;    // .context_length
  uint32_t n_embd = 0;         // .embedding_length
  uint32_t n_layer = 0;        // .block_count
  uint32_t n_ff = 0;           // .feed_forward_length
  uint32_t n_head = 0;         // .attention.head_count
  uint32_t n_head_kv = 0;      // .attention.head_count_kv
  uint32_t head_dim = 0;       // .attention.key_length (= value_length); default n_embd / n_head
  uint32_t rope_dim = 0;       // .rope.dimension_count; default head_dim
  float rms_eps = 1e-6f;       // .attention.layer_norm_rms_epsilon
  float rope_theta = 10000.f;  // .rope.freq_base
  bool tied_output = false;    // no "output.weight": the head reuses token_embd
};

enum class tensor_role { embedding, norm, matrix, bias };

struct tensor_spec {
  std::string name;             // "blk.3.attn_q.weight"
  std::vector<uint64_t> shape;  // GGUF order: shape[0] contiguous (n_in for matrices)
  tensor_role role = tensor_role::matrix;
  int layer = -1;               // -1 for global tensors
};

struct arch_spec {
  std::string_view name;  // "llama", "qwen2", "qwen3"
  arch_flags flags;
};

const arch_spec* find_arch(std::string_view name);
std::vector<std::string_view> known_archs();

// Every tensor the architecture needs for these hyperparameters, in llama.cpp's converter order
// (token_embd, per layer ..., output_norm, output unless tied).
std::vector<tensor_spec> expected_tensors(const arch_spec& arch, const hparams& hp);

// Reads "<arch>.*" keys (and the vocab size from tokenizer.ggml.tokens or token_embd);
// a missing or mistyped key is an error naming it.
result<hparams> read_hparams(const arch_spec& arch, const gguf_file& file);
// Writes general.architecture and the "<arch>.*" keys as llama.cpp's converter does.
void write_hparams(const arch_spec& arch, const hparams& hp, gguf_writer& out);

}  // namespace tandem
