#include "kvstash/status.h"

namespace kvstash {

std::string_view CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kNotFound: return "NotFound";
    case Status::Code::kCorruption: return "Corruption";
    case Status::Code::kInvalidArgument: return "InvalidArgument";
    case Status::Code::kIOError: return "IOError";
    case Status::Code::kUnavailable: return "Unavailable";
    case Status::Code::kMismatch: return "Mismatch";
    case Status::Code::kResourceExhausted: return "ResourceExhausted";
    case Status::Code::kDeadlineExceeded: return "DeadlineExceeded";
    case Status::Code::kNotSupported: return "NotSupported";
    case Status::Code::kPermissionDenied: return "PermissionDenied";
    case Status::Code::kInternal: return "Internal";
  }
  return "Unknown";
}

Status Status::FromCode(uint8_t code, std::string_view msg) {
  if (code == 0) return Status();
  if (code > static_cast<uint8_t>(Code::kInternal)) {
    return Status(Code::kInternal, std::string("unknown status code ") +
                                       std::to_string(code) + ": " + std::string(msg));
  }
  return Status(static_cast<Code>(code), msg);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  s += ": ";
  s += msg_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += msg_;
  return Status(code_, m);
}

}  // namespace kvstash
