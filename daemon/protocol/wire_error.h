// Error codes carried in `{id, error: {code, message}}` replies (see tandem-protocol(7)).
#pragma once

#include <string>
#include <string_view>

namespace tandem::proto {

enum class error_code {
  bad_frame,      // framing or msgpack could not be decoded
  bad_request,    // a field is missing, has the wrong type or is out of range
  unknown_op,     // `op` names no operation
  duplicate_id,   // an in-flight request on this connection already uses this id
  not_found,      // no such model alias or request id
  exists,         // load: the alias is already taken
  busy,           // the model's queue is full
  load_failed,    // load/swap could not load the file; the old model keeps serving
  forbidden,      // the peer's uid/gid is not allowed
  shutting_down,  // the daemon is draining and accepts no new work
  engine_error,   // the engine failed while running the request
  internal,       // a bug in tandemd
};

std::string_view to_string(error_code c);

// A protocol-level failure ready to be sent back.
struct wire_error {
  error_code code;
  std::string message;
};

}  // namespace tandem::proto
