// libFuzzer target: an HTTP request body → the OpenAI mapping of both endpoints → the generate
// request tandem-http would send → tandemd's request decoder. A crash, a sanitizer report, an
// exception out of the mapping, or a request the mapping accepts that tandemd's decoder refuses
// (the client would get tandemd's error instead of a 400 naming its field) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "openai_request.h"
#include "protocol/frame.h"
#include "protocol/reply.h"
#include "protocol/request.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tandem;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (const http::api_kind kind : {http::api_kind::chat, http::api_kind::completion}) {
    const auto parsed = http::parse_generate(kind, body);
    const auto* call = std::get_if<http::generate_call>(&parsed);
    if (!call) continue;
    nlohmann::json request = call->request;
    request["id"] = 1;
    const std::string frame = proto::pack_frame(request);
    if (!proto::decode_request(std::string_view(frame).substr(proto::frame_header_size)).ok()) __builtin_trap();
  }
  return 0;
}
