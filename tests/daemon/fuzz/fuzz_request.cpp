// libFuzzer target: bytes from a socket → frame decoder → request decoder. Any crash, hang or
// sanitizer report is a bug; errors are the expected outcome for most inputs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "protocol/frame.h"
#include "protocol/reply.h"
#include "protocol/request.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem::proto;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // Small cap so that the over-the-cap path is reached too.
  frame_decoder dec(1u << 16);
  // Feed in uneven pieces to exercise partial headers and bodies.
  std::size_t pos = 0, step = 1;
  std::string body;
  while (pos < bytes.size()) {
    const std::size_t n = std::min(step, bytes.size() - pos);
    dec.feed(bytes.substr(pos, n));
    pos += n;
    step = step * 3 % 17 + 1;
    for (;;) {
      const auto st = dec.next(body);
      if (st != frame_decoder::state::frame) break;
      const auto d = decode_request(body);
      // Building the reply must work for whatever was decoded.
      const auto reply = d.ok() ? result_frame(d.req().id, {{"op", op_name(d.req().body)}})
                                : error_frame(d.id, d.err());
      if (reply.size() < frame_header_size) __builtin_trap();
    }
    if (dec.failed()) break;
  }
  // The raw input as one body, too: most inputs never form a valid frame header.
  (void)decode_request(bytes);
  return 0;
}
