// How the tandem client fails: an exit status (documented in tandem(1)) with a message, and
// outcome<T>, a value or such a failure, so that every command ends in one well-defined status.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tandem::client {

// Exit statuses of tandem(1). Scripts rely on them: keep them stable and keep the man page true.
enum class exit_status : int {
  ok = 0,
  no_daemon = 1,     // the socket could not be reached (missing, refused, permission denied)
  usage = 2,         // bad arguments or an empty prompt (2, as tandemd and tandem-model use)
  server_error = 3,  // the daemon answered with an error not listed below
  busy = 4,          // busy or shutting_down: retrying later may work
  not_found = 5,     // no such model alias
  load_failed = 6,   // load or swap could not load the file
  forbidden = 7,     // the daemon does not allow this user
  protocol = 8,      // the connection broke or a reply could not be understood
  interrupted = 130  // Ctrl-C (the request was cancelled first)
};

inline int to_int(exit_status s) { return static_cast<int>(s); }

// The exit status for an error code of a daemon reply (tandem-protocol(7)).
exit_status status_for_code(std::string_view code);

struct failure {
  exit_status status;
  std::string message;
};

// A value or a failure; callers test ok() before using the value.
template <class T>
class [[nodiscard]] outcome {
 public:
  outcome(T value) : v_(std::move(value)) {}
  outcome(failure f) : v_(std::move(f)) {}

  bool ok() const { return v_.index() == 0; }
  T& value() { return std::get<0>(v_); }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }
  const failure& fail() const { return std::get<1>(v_); }

 private:
  std::variant<T, failure> v_;
};

// Prints "tandem: MESSAGE" on stderr and returns the failure's exit status.
int report(const failure& f);

}  // namespace tandem::client
