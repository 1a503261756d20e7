// Status: the outcome of an operation that can fail, leveldb-sized.
//
// A Status is either Ok or carries a Code and a human-readable message. Codes exist
// only where a caller must branch on them. No exception crosses a module boundary:
// anything read from disk or the network that is wrong becomes Corruption or
// InvalidArgument, never an assert or abort.
//
// Retryable codes (Unavailable, ResourceExhausted, DeadlineExceeded) mean "the same
// request may succeed later"; every other failure is final for that request.
//
// Thread-safety: a Status is a value; distinct objects may be used concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace kvstash {

class [[nodiscard]] Status {
 public:
  enum class Code : uint8_t {
    kOk = 0,
    kNotFound = 1,           // key or entry absent (a cache miss is not an error)
    kCorruption = 2,         // bytes failed a checksum or a format rule
    kInvalidArgument = 3,    // caller passed a bad shape, dtype, size, option
    kIOError = 4,            // the OS or storage engine failed (disk full, EIO)
    kUnavailable = 5,        // peer or service down; retryable
    kMismatch = 6,           // artifact/predictor/model digest differs from ours
    kResourceExhausted = 7,  // a budget or limit was hit; retryable
    kDeadlineExceeded = 8,   // the caller's deadline passed; retryable
    kNotSupported = 9,       // valid request this build/version cannot serve
    kPermissionDenied = 10,  // credential rejected
    kInternal = 11,          // a bug: an invariant of ours does not hold
  };

  Status() = default;  // Ok

  static Status Ok() { return Status(); }
  static Status NotFound(std::string_view msg) { return {Code::kNotFound, msg}; }
  static Status Corruption(std::string_view msg) { return {Code::kCorruption, msg}; }
  static Status InvalidArgument(std::string_view msg) { return {Code::kInvalidArgument, msg}; }
  static Status IOError(std::string_view msg) { return {Code::kIOError, msg}; }
  static Status Unavailable(std::string_view msg) { return {Code::kUnavailable, msg}; }
  static Status Mismatch(std::string_view msg) { return {Code::kMismatch, msg}; }
  static Status ResourceExhausted(std::string_view msg) { return {Code::kResourceExhausted, msg}; }
  static Status DeadlineExceeded(std::string_view msg) { return {Code::kDeadlineExceeded, msg}; }
  static Status NotSupported(std::string_view msg) { return {Code::kNotSupported, msg}; }
  static Status PermissionDenied(std::string_view msg) { return {Code::kPermissionDenied, msg}; }
  static Status Internal(std::string_view msg) { return {Code::kInternal, msg}; }
  // Builds a Status from a wire/stored code; unknown codes become kInternal.
  static Status FromCode(uint8_t code, std::string_view msg);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsMismatch() const { return code_ == Code::kMismatch; }
  // True for codes where retrying the same request later may succeed.
  bool IsRetryable() const {
    return code_ == Code::kUnavailable || code_ == Code::kResourceExhausted ||
           code_ == Code::kDeadlineExceeded;
  }

  // "Corruption: payload checksum mismatch" or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "<context>: <message>"; Ok stays Ok.
  Status WithContext(std::string_view context) const;

  bool operator==(const Status& other) const = default;

 private:
  Status(Code code, std::string_view msg) : code_(code), msg_(msg) {}

  Code code_ = Code::kOk;
  std::string msg_;
};

// Name of a code, e.g. "Corruption".
std::string_view CodeName(Status::Code code);

}  // namespace kvstash

// Evaluates `expr` (a Status); returns it from the enclosing function if not ok.
#define KVSTASH_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::kvstash::Status _kvstash_status = (expr);        \
    if (!_kvstash_status.ok()) return _kvstash_status; \
  } while (0)
