// result<T>: a value or an error message. Bad input (files, frames, requests) is reported
// through this type rather than exceptions or asserts, so callers must look at it.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace tandem {

struct error {
  std::string message;
};

// Builds an error from pieces that stream into a string: make_error("tensor ", name, " at ", off).
template <class... Parts>
error make_error(const Parts&... parts);

template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::move(value)) {}
  result(error e) : v_(std::move(e)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const error& err() const { return std::get<1>(v_); }
  const std::string& message() const { return err().message; }

 private:
  std::variant<T, error> v_;
};

template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(error e) : ok_(false), e_(std::move(e)) {}

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const error& err() const { return e_; }
  const std::string& message() const { return e_.message; }

 private:
  bool ok_ = true;
  error e_;
};

using status = result<void>;

}  // namespace tandem

#include <sstream>

namespace tandem {
template <class... Parts>
error make_error(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return error{os.str()};
}
}  // namespace tandem

// Returns early from the enclosing function when a status-like expression failed.
#define TANDEM_TRY(expr)                         \
  do {                                           \
    auto tandem_try_r_ = (expr);                 \
    if (!tandem_try_r_.ok()) return tandem_try_r_.err(); \
  } while (0)
