// Status and StatusOr<T>: the error type every fallible Osprey call returns.
//
// A Status is either OK or carries a code and a human-readable message that says what was wrong and
// where (file, key path, peer, table). Statuses are cheap to copy when OK (no allocation).
// Network, config, storage and bad-input failures are Statuses, never aborts; OSPREY_CHECK (in
// logging.h) is only for programmer bugs.
//
// Thread-safety: Status and StatusOr are values; distinct objects may be used from distinct threads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace osprey {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kAlreadyExists = 3,
  kOutOfRange = 4,
  kFailedPrecondition = 5,
  kUnavailable = 6,
  kDeadlineExceeded = 7,
  kResourceExhausted = 8,
  kDataLoss = 9,
  kAborted = 10,
  kUnimplemented = 11,
  kInternal = 12,
  kPermissionDenied = 13,  // the peer's role may not make this request
};

// Returns the code's name, e.g. "InvalidArgument".
const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  const std::string& message() const;

  // "OK" or "InvalidArgument: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(const std::string& context) const;

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null when OK
};

inline Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
inline Status AlreadyExists(std::string m) { return Status(StatusCode::kAlreadyExists, std::move(m)); }
inline Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status OutOfRange(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
inline Status FailedPrecondition(std::string m) { return Status(StatusCode::kFailedPrecondition, std::move(m)); }
inline Status Unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
inline Status DeadlineExceeded(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }
inline Status ResourceExhausted(std::string m) { return Status(StatusCode::kResourceExhausted, std::move(m)); }
inline Status DataLoss(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
inline Status Aborted(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
inline Status Unimplemented(std::string m) { return Status(StatusCode::kUnimplemented, std::move(m)); }
inline Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
inline Status PermissionDenied(std::string m) { return Status(StatusCode::kPermissionDenied, std::move(m)); }

// Holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Internal("StatusOr constructed from OK status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // Precondition: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace osprey

#define OSPREY_STATUS_CONCAT_INNER(a, b) a##b
#define OSPREY_STATUS_CONCAT(a, b) OSPREY_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define OSPREY_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::osprey::Status _osprey_st = (expr);            \
    if (!_osprey_st.ok()) return _osprey_st;         \
  } while (0)

// `OSPREY_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a StatusOr or returns its error.
#define OSPREY_ASSIGN_OR_RETURN(lhs, expr) \
  OSPREY_ASSIGN_OR_RETURN_IMPL(OSPREY_STATUS_CONCAT(_osprey_so_, __LINE__), lhs, expr)
#define OSPREY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
