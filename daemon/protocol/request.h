// Typed requests of tandem-protocol(7), decoded from one frame body with strict field checks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "protocol/model_settings.h"
#include "protocol/wire_error.h"

namespace tandem::proto {

inline constexpr int protocol_version = 1;

using request_id = std::uint64_t;

struct chat_message {
  std::string role;
  std::string content;
};

// Sampling parameters; defaults are what a request that omits them gets.
struct sampling_params {
  float temperature = 0.8f;
  std::uint32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  std::optional<std::uint64_t> seed;
};

struct hello_request {
  std::string client;
};
struct generate_request {
  std::string model;  // empty: the default alias
  std::optional<std::string> prompt;
  std::vector<chat_message> messages;  // used when prompt is absent
  sampling_params sampling;
  std::uint32_t max_tokens = 256;
  std::vector<std::string> stop;
  bool stream = true;
};
struct cancel_request {
  request_id target = 0;
};
struct tokenize_request {
  std::string model;
  std::string text;
  bool add_special = true;
};
struct detokenize_request {
  std::string model;
  std::vector<std::int32_t> tokens;
};
struct models_request {};
struct load_request {
  std::string name;
  std::string path;
  model_settings settings;  // over the alias's [model.NAME] table and the global keys
};
struct unload_request {
  std::string name;
};
struct swap_request {
  std::string name;
  std::string path;
  model_settings settings;  // the new model's, as for load
};
struct status_request {};
struct metrics_request {};

using request_body = std::variant<hello_request, generate_request, cancel_request, tokenize_request,
                                  detokenize_request, models_request, load_request, unload_request,
                                  swap_request, status_request, metrics_request>;

struct request {
  request_id id = 0;
  request_body body;
};

// Bounds a request must respect; the decoder reports anything outside them as bad_request.
struct request_limits {
  std::uint32_t max_tokens = 1u << 20;
  std::size_t max_stop = 16;
  std::size_t max_stop_len = 256;
  std::size_t max_messages = 4096;
  std::size_t max_role_len = 64;  // a chat message's role, in bytes
  std::size_t max_name_len = 64;
  std::size_t max_path_len = 4096;
  std::size_t max_depth = 16;  // msgpack nesting
};

// The outcome of decoding one body. The id is kept even when the rest is bad so that the error
// reply can carry it.
struct decoded {
  std::optional<request_id> id;
  std::variant<request, wire_error> value;

  bool ok() const { return value.index() == 0; }
  const request& req() const { return std::get<0>(value); }
  const wire_error& err() const { return std::get<1>(value); }
};

// Decodes one frame body (a msgpack map). Never throws; msgpack limits derive from the body size.
decoded decode_request(std::string_view body, const request_limits& limits = {});

// Name of the op a body holds, for logs ("generate").
std::string_view op_name(const request_body& body);

// Aliases: 1..64 chars of [A-Za-z0-9._:-].
bool valid_model_name(std::string_view name, std::size_t max_len = 64);

}  // namespace tandem::proto
