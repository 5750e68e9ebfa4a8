// Byte-level BPE tokenizer (GPT-2 style, as Qwen, Llama 3 and SmolLM use) built from the GGUF
// tokenizer metadata. Matches Hugging Face `tokenizers` ids for the supported pre-tokenizers.
//
// Encoding: added tokens are found in the raw text first (leftmost, longest). User-defined added
// tokens (<think>, <tool_call>, ...) always match; control tokens (<|im_end|>, <|eot_id|>, ...)
// match only with parse_special, so text from an untrusted user cannot inject them. The text
// between them is NFC-normalised (Qwen vocabularies, as HF does), split by the pre-tokenizer, and
// each piece is BPE-merged by merge rank. Thread safe: encode/decode are const; the per-piece
// BPE cache is shared behind a mutex and bounded.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/result.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_vocab.h"

namespace tandem {

class gguf_file;

struct encode_options {
  bool parse_special = false;  // match control tokens written in the text
  bool add_bos = false;        // prepend BOS when the vocabulary has one (see wants_bos())
  // With parse_special: byte ranges [begin, end) of the text (ascending) where control tokens are
  // not matched (text from a user inside a rendered chat, see chat/chat_template.h).
  std::span<const std::pair<size_t, size_t>> plain;
};

class tokenizer {
 public:
  // Validates the vocabulary (types, merges, special ids, pre-tokenizer name) and indexes it.
  static result<tokenizer> from_vocab(tokenizer_vocab vocab);
  // Reads tokenizer.ggml.* and tokenizer.chat_template from a GGUF file.
  static result<tokenizer> from_gguf(const gguf_file& file);

  tokenizer(tokenizer&&) noexcept;
  tokenizer& operator=(tokenizer&&) noexcept;
  ~tokenizer();

  // Errors only for text that is not valid UTF-8.
  result<std::vector<int32_t>> encode(std::string_view text, const encode_options& opt = {}) const;

  // The bytes the ids stand for (control tokens as their text unless skip_control). May end in
  // the middle of a UTF-8 sequence; see stream_decoder for incremental output. Errors on an id
  // outside the vocabulary.
  result<std::string> decode(std::span<const int32_t> ids, bool skip_control = false) const;
  // Bytes of one token; empty view for an id out of range (check with is_valid_id).
  std::string_view token_bytes(int32_t id) const;

  bool is_valid_id(int32_t id) const { return id >= 0 && static_cast<size_t>(id) < bytes_.size(); }
  size_t size() const { return bytes_.size(); }
  token_type type_of(int32_t id) const;
  // Id of an added/special token written exactly so, e.g. "<|im_end|>"; also finds normal tokens
  // by their decoded bytes.
  std::optional<int32_t> find_token(std::string_view text) const;

  const tokenizer_vocab& vocab() const { return vocab_; }
  pre_type pre() const { return pre_; }
  bool wants_bos() const { return vocab_.add_bos && vocab_.bos_id >= 0; }

 private:
  struct merge_entry {
    int32_t rank;
    int32_t result;
  };
  struct bpe_cache;

  tokenizer();
  status index();
  status index_merges();
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;
  void merge_piece(std::string_view bytes, std::vector<int32_t>& out) const;
  const merge_entry* find_merge(int32_t left, int32_t right) const;

  tokenizer_vocab vocab_;
  pre_type pre_ = pre_type::qwen2;
  bool nfc_ = false;            // HF's Qwen tokenizers normalise with NFC; Llama 3/SmolLM do not
  bool ignore_merges_ = false;  // Llama 3: a piece that is itself a token is not merged
  std::vector<std::string> bytes_;                       // per id: what it decodes to
  std::unordered_map<std::string, int32_t> by_bytes_;    // normal tokens by decoded bytes
  std::unordered_map<uint64_t, merge_entry> merges_;     // (left id, right id) -> rank, result
  std::array<int32_t, 256> byte_ids_{};                  // the single-byte tokens
  std::array<std::vector<int32_t>, 256> added_by_first_; // added tokens by first byte, longest first
  std::unique_ptr<bpe_cache> cache_;
};

}  // namespace tandem
