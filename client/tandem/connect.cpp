// Error kind → exit status (tandem(1)); the daemon's codes go through status_for_code.
#include "connect.h"

namespace tandem::client {

failure to_failure(const error& e) {
  switch (e.kind) {
    case error_kind::connect: return failure{exit_status::no_daemon, e.message};
    case error_kind::usage: return failure{exit_status::usage, e.message};
    case error_kind::daemon: return failure{status_for_code(e.code), to_string(e)};
    case error_kind::interrupted: return failure{exit_status::interrupted, e.message};
    case error_kind::io:
    case error_kind::protocol:
    case error_kind::timeout: break;
  }
  return failure{exit_status::protocol, e.message};
}

outcome<connection> connect_to_daemon(const std::string& socket_path) {
  return to_outcome(connection::connect(socket_path));
}

}  // namespace tandem::client
