// Test helpers shared by every test binary: Status-aware assertions that print the
// status message on failure, and the path of the source tree for fixtures.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kvstash/result.h"
#include "kvstash/status.h"

#define ASSERT_OK(expr)                                              \
  do {                                                               \
    const ::kvstash::Status _s = ::kvstash::testing::ToStatus(expr); \
    ASSERT_TRUE(_s.ok()) << _s.ToString();                           \
  } while (0)
#define EXPECT_OK(expr)                                              \
  do {                                                               \
    const ::kvstash::Status _s = ::kvstash::testing::ToStatus(expr); \
    EXPECT_TRUE(_s.ok()) << _s.ToString();                           \
  } while (0)
// ASSERT_OK_AND_ASSIGN(auto x, Foo()): asserts the Result is ok and binds its value.
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(KVSTASH_CONCAT_(_kvstash_assert_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString(); \
  lhs = std::move(tmp).value()
// EXPECT_STATUS(expr, Code): the Status (or Result's status) has the given code.
// Accepts a streamed message like any gtest assertion.
#define EXPECT_STATUS(expr, code_name) \
  EXPECT_TRUE(::kvstash::testing::HasCode(expr, ::kvstash::Status::Code::code_name))

namespace kvstash::testing {

inline Status ToStatus(const Status& s) { return s; }
template <typename T>
Status ToStatus(const Result<T>& r) {
  return r.status();
}

inline ::testing::AssertionResult HasCode(const Status& s, Status::Code code) {
  if (s.code() == code) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected " << CodeName(code) << ", got "
                                       << s.ToString();
}
template <typename T>
::testing::AssertionResult HasCode(const Result<T>& r, Status::Code code) {
  return HasCode(r.status(), code);
}

// Root of the source tree (for committed fixtures under tests/ and tools/).
inline std::string SourceDir() {
  const char* env = std::getenv("KVSTASH_SOURCE_DIR");
  if (env != nullptr && *env != '\0') return env;
#ifdef KVSTASH_SOURCE_DIR
  return KVSTASH_SOURCE_DIR;
#else
  return ".";
#endif
}

// Root of the model fixtures fetched by scripts/setup.sh (KVSTASH_MODELS_DIR or
// <source>/models).
inline std::string ModelsDir() {
  const char* env = std::getenv("KVSTASH_MODELS_DIR");
  if (env != nullptr && *env != '\0') return env;
  return SourceDir() + "/models";
}

}  // namespace kvstash::testing
