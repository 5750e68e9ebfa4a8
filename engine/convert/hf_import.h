// Imports a Hugging Face model directory (config.json + *.safetensors, as transformers'
// save_pretrained writes it) into a GGUF file with llama.cpp's names, layout and metadata.
// Tensors stream from the mmapped safetensors through conversion/quantization into the writer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "gguf/gguf_writer.h"
#include "model/arch_spec.h"
#include "quant/ggml_type.h"

namespace tandem {

// What config.json says, already mapped onto llama.cpp's hyperparameters.
struct hf_config {
  std::string model_type;  // "qwen3", "qwen2", "llama", "qwen3_5_text", "qwen3_5"
  const arch_spec* arch = nullptr;
  hparams hp;  // hp.tied_output mirrors tie_word_embeddings
};

std::vector<std::string_view> supported_hf_model_types();

// Parses config.json text; `label` names it in errors. Errors name the offending field.
result<hf_config> parse_hf_config(std::string_view json_text, const std::string& label);
result<hf_config> read_hf_config(const std::string& path);

// "model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight"; nullopt for names that are
// not part of the supported architectures.
std::optional<std::string> map_hf_tensor_name(std::string_view hf_name);

// llama.cpp's converter permutes the rows of Llama's q and k (per head: HF row j*(d/2)+i becomes
// row 2i+j) so that its adjacent-pair RoPE equals HF's rotate_half. Returns the HF row that GGUF
// row `row` comes from; head_dim must be even.
uint64_t llama_qk_source_row(uint64_t row, uint64_t head_dim);

// Qwen3.5's V-head reorder (llama.cpp's _LinearAttentionVReorderBase): HF groups the value heads
// by key head (head g*(Hv/Hk)+j is the j-th of k-head g), the GGUF tiles them (that head becomes
// j*Hk+g, so v-head h uses k-head h % Hk). For a span of Hv heads of head_size entries each, returns
// the HF index that GGUF index `index` holds.
uint64_t qwen35_v_source_index(uint64_t index, uint32_t n_k_heads, uint32_t n_v_heads, uint64_t head_size);

// llama.cpp's general.file_type for a model whose 2-D weights are all `t` (LLAMA_FTYPE_*).
std::optional<uint32_t> llama_file_type(ggml_type t);

struct import_options {
  ggml_type type = ggml_type::f16;  // for matrices and the embedding; 1-D tensors stay F32
  std::string name;                 // general.name; empty: the directory's name
  bool tokenizer = true;            // import tokenizer.json when present
  unsigned threads = 0;             // conversion threads; 0: hardware concurrency
  gguf_writer::progress_fn progress;
};

struct import_summary {
  std::string arch;
  hparams hp;
  size_t n_tensors = 0;
  uint64_t data_bytes = 0;
  bool has_tokenizer = false;
  std::vector<std::string> notes;  // e.g. tensors kept at F16 because rows don't fit the block size
};

// Reads DIR, validates every tensor against the architecture before writing, then writes out_path.
result<import_summary> import_hf_model(const std::string& dir, const std::string& out_path,
                                       const import_options& options);

}  // namespace tandem
