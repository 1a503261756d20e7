// Result<T>: a value of type T or the Status explaining why there is none.
//
//   Result<KvChunk> r = Decode(bytes);
//   if (!r.ok()) return r.status();
//   KvChunk chunk = std::move(r).value();
//
// REQUIRES: value() only on an ok Result; a Result built from an Ok Status is a bug
// and holds Status::Internal instead. Thread-safety: a value type.
#pragma once

#include <type_traits>
#include <utility>
#include <variant>

#include "kvstash/status.h"

namespace kvstash {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(const T& value) : v_(value) {}            // NOLINT: implicit by design
  Result(T&& value) : v_(std::move(value)) {}      // NOLINT
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) {
      v_ = Status::Internal("Result constructed from an Ok status without a value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // Ok when a value is held, else the error.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &std::get<T>(v_); }
  T* operator->() { return &std::get<T>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvstash

#define KVSTASH_CONCAT_INNER_(a, b) a##b
#define KVSTASH_CONCAT_(a, b) KVSTASH_CONCAT_INNER_(a, b)

// KVSTASH_ASSIGN_OR_RETURN(auto x, Foo()); declares/assigns x from a Result, or
// returns its Status from the enclosing function.
#define KVSTASH_ASSIGN_OR_RETURN(lhs, expr) \
  KVSTASH_ASSIGN_OR_RETURN_IMPL_(KVSTASH_CONCAT_(_kvstash_result_, __LINE__), lhs, expr)
#define KVSTASH_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
