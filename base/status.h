// Errors as values. Every function that reads something from outside the
// process (a file, a message, an argument) returns a Status or a Result<T>
// whose message names what was wrong and where, e.g.
//   "experts-L7.bin: record 12 says expert 13".
// Nothing in the engine throws across its public interface.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace waste {

class Status {
 public:
  Status() = default;  // success
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }

  bool ok() const { return !message_.has_value(); }
  explicit operator bool() const { return ok(); }
  // The message of a failed status; empty for success.
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }
  // Returns a failed status with `prefix: ` put in front of the message.
  Status Prefixed(const std::string& prefix) const {
    return ok() ? *this : Error(prefix + ": " + *message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

// A value or the Status saying why there is none.
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}       // NOLINT: implicit by design
  Result(Status error) : v_(std::move(error)) {}  // NOLINT: must be a failure

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace waste

// Returns early from the enclosing function when `expr` (a Status) failed.
#define WASTE_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::waste::Status waste_status_ = (expr);        \
    if (!waste_status_.ok()) return waste_status_; \
  } while (0)
