// Wire names of the error codes.
#include "protocol/wire_error.h"

namespace tandem::proto {

std::string_view to_string(error_code c) {
  switch (c) {
    case error_code::bad_frame: return "bad_frame";
    case error_code::bad_request: return "bad_request";
    case error_code::unknown_op: return "unknown_op";
    case error_code::duplicate_id: return "duplicate_id";
    case error_code::not_found: return "not_found";
    case error_code::exists: return "exists";
    case error_code::busy: return "busy";
    case error_code::load_failed: return "load_failed";
    case error_code::forbidden: return "forbidden";
    case error_code::shutting_down: return "shutting_down";
    case error_code::engine_error: return "engine_error";
    case error_code::internal: return "internal";
  }
  return "internal";
}

}  // namespace tandem::proto
