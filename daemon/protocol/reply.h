// Reply frames of tandem-protocol(7). Replies are built as JSON values and packed to msgpack, which
// keeps the many small reply shapes readable; every reply map carries the request's id.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "protocol/request.h"
#include "protocol/wire_error.h"

namespace tandem::proto {

// {id, result: {...}}: the single (or final) reply to a request.
std::string result_frame(request_id id, nlohmann::json result);

// {id, error: {code, message}}; id is nil when the request's id could not be read.
std::string error_frame(std::optional<request_id> id, const wire_error& e);

// {id, chunk: "text"}: one streamed piece of a generation (always whole UTF-8 characters).
std::string chunk_frame(request_id id, const std::string& text);

// Packs a whole reply map into one frame.
std::string pack_frame(const nlohmann::json& reply);

}  // namespace tandem::proto
