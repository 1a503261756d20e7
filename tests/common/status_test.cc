#include <gtest/gtest.h>

#include "kvstash/result.h"
#include "kvstash/status.h"
#include "tests/support/test_util.h"

namespace kvstash {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  KVSTASH_ASSIGN_OR_RETURN(int h, Half(x));
  KVSTASH_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, OkAndCodes) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status s = Status::Corruption("bad crc");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_EQ(s.ToString(), "Corruption: bad crc");
  EXPECT_EQ(s.WithContext("payload").ToString(), "Corruption: payload: bad crc");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

TEST(StatusTest, RetryableOnlyForTransientCodes) {
  EXPECT_TRUE(Status::Unavailable("").IsRetryable());
  EXPECT_TRUE(Status::ResourceExhausted("").IsRetryable());
  EXPECT_TRUE(Status::DeadlineExceeded("").IsRetryable());
  EXPECT_FALSE(Status::Corruption("").IsRetryable());
  EXPECT_FALSE(Status::Mismatch("").IsRetryable());
  EXPECT_FALSE(Status::NotFound("").IsRetryable());
}

TEST(StatusTest, FromCodeRoundTripsAndRejectsUnknown) {
  for (uint8_t c = 0; c <= 11; ++c) {
    EXPECT_EQ(static_cast<uint8_t>(Status::FromCode(c, "m").code()), c);
  }
  EXPECT_EQ(Status::FromCode(200, "m").code(), Status::Code::kInternal);
}

TEST(ResultTest, ValueAndErrorPropagation) {
  ASSERT_OK_AND_ASSIGN(int q, Quarter(12));
  EXPECT_EQ(q, 3);
  EXPECT_STATUS(Quarter(6), kInvalidArgument);  // 6 -> 3 -> odd
  Result<int> from_ok(Status::Ok());
  EXPECT_STATUS(from_ok, kInternal);
}

}  // namespace
}  // namespace kvstash
