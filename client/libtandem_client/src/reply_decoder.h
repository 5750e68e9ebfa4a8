// Reply frames of tandem-protocol(7) turned into the typed replies of tandem/client.h. A reply
// that is not what the protocol promises is an error_kind::protocol naming the field, never a
// crash or a silently wrong value; fields an older daemon leaves out keep their defaults.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tandem/client.h"

namespace tandem::client::wire {

// Replies may be larger than requests (a tokenized 16 MiB prompt); the daemon is trusted more
// than its peers are, but a cap still turns a corrupt length into an error instead of an OOM.
inline constexpr std::uint32_t max_reply_frame = 256u << 20;
// msgpack nesting a reply may have (status is 4 deep); deeper is refused before it is built.
inline constexpr std::size_t max_reply_depth = 32;

struct reply {
  std::optional<std::uint64_t> id;  // nil: the daemon could not read the request's id
  nlohmann::json map;

  bool has_error() const { return map.contains("error"); }
  bool is_final() const { return map.contains("result") || has_error(); }
};

// One frame body: msgpack within the limits, nothing after it, a map whose id is an unsigned
// integer or nil.
result<reply> parse_reply(std::string_view body);

// The error of an {id, error: {code, message}} reply: error_kind::daemon (code "internal" when
// the daemon sent none).
error daemon_error(const nlohmann::json& reply_map);

// Compact JSON text; invalid UTF-8 is replaced rather than thrown on.
std::string json_text(const nlohmann::json& j);

// The result map of each op's final reply.
result<hello_reply> decode_hello(const nlohmann::json& result);
result<generate_result> decode_generate(const nlohmann::json& result);
result<cancel_reply> decode_cancel(const nlohmann::json& result);
result<tokenize_reply> decode_tokenize(const nlohmann::json& result);
result<detokenize_reply> decode_detokenize(const nlohmann::json& result);
result<models_reply> decode_models(const nlohmann::json& result);
result<status_reply> decode_status(const nlohmann::json& result);
result<loaded_reply> decode_loaded(const nlohmann::json& result);
result<unload_reply> decode_unload(const nlohmann::json& result);

}  // namespace tandem::client::wire
