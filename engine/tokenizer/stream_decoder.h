// Incremental detokenizer for streaming generation: feeds token ids, emits text that always ends
// on a UTF-8 character boundary (a token may end inside a multi-byte character; its remaining
// bytes are held until the next token completes it). Bytes that can never form a valid character
// come out as U+FFFD, so every emitted chunk is valid UTF-8.
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"

namespace tandem {

class tokenizer;

class stream_decoder {
 public:
  // The tokenizer must outlive the decoder.
  explicit stream_decoder(const tokenizer& tok, bool skip_control = false)
      : tok_(&tok), skip_control_(skip_control) {}

  // Text completed by this token (possibly empty). Error for an id outside the vocabulary.
  result<std::string> push(int32_t id);
  // Raw bytes in, complete characters out; for callers that hold bytes rather than ids.
  std::string push_bytes(std::string_view bytes);
  // End of stream: whatever is still pending, as U+FFFD for an unfinished character.
  std::string finish();

 private:
  const tokenizer* tok_;
  bool skip_control_;
  std::string pending_;  // at most 3 bytes: the start of an unfinished character
};

}  // namespace tandem
