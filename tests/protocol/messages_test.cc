// Message bodies: Decode(Encode(x)) == x for every message type, with size sweeps;
// every truncation and any trailing byte is an error, never a crash.
#include "protocol/messages.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/support/test_util.h"

namespace kvstash::protocol {
namespace {

StoredKey KeyOf(uint32_t i) {
  StoredKey k{};
  for (size_t j = 0; j < k.size(); ++j) k[j] = static_cast<uint8_t>(i * 31 + j);
  return k;
}

std::vector<uint8_t> Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// Round trip plus: every strict prefix of the body fails to decode (for messages
// whose body is not free-form), and one extra trailing byte fails too.
template <typename T>
void CheckRoundTrip(const T& m, bool fixed_body = true) {
  std::vector<uint8_t> body;
  m.Encode(&body);
  ASSERT_OK_AND_ASSIGN(T back, T::Decode(m.Flags(), body));
  EXPECT_EQ(back, m);
  if (!fixed_body) return;
  for (size_t n = 0; n < body.size(); ++n) {
    EXPECT_FALSE(T::Decode(m.Flags(), std::span<const uint8_t>(body).first(n)).ok())
        << "prefix of " << n << " of " << body.size() << " bytes decoded";
  }
  body.push_back(0);
  EXPECT_FALSE(T::Decode(m.Flags(), body).ok()) << "trailing byte accepted";
}

TEST(MessagesTest, Hello) {
  for (size_t cred : {0, 1, 32, 4096}) {
    HelloRequest m{1, "tenant-a", std::string(cred, 'x'), "bench"};
    CheckRoundTrip(m);
  }
  CheckRoundTrip(HelloRequest{1, std::string(255, 't'), "secret", ""});
  CheckRoundTrip(HelloReply{1, 64u << 20, 128, "node-1"});
  std::vector<uint8_t> body;
  HelloRequest{1, "", "x", ""}.Encode(&body);
  EXPECT_STATUS(HelloRequest::Decode(0, body), kInvalidArgument);
}

TEST(MessagesTest, Lookup) {
  for (size_t n : {0, 1, 2, 17}) {
    LookupRequest m;
    for (size_t i = 0; i < n; ++i) m.keys.push_back({KeyOf(i), static_cast<uint32_t>(256 - i)});
    m.require_state = n % 2 == 1;
    CheckRoundTrip(m);
  }
  CheckRoundTrip(LookupReply{3, 768});
  // A count above the limit is refused before allocating.
  std::vector<uint8_t> body = {0x01, 0x00, 0x01, 0x00};  // 65537
  EXPECT_STATUS(LookupRequest::Decode(0, body), kInvalidArgument);
  std::vector<uint8_t> big = {0xFF, 0xFF, 0xFF, 0xFF};
  EXPECT_FALSE(LookupRequest::Decode(0, big).ok());
}

TEST(MessagesTest, Put) {
  for (size_t n : {1, 2, 135, 136, 137, 5000}) {
    PutRequest m;
    m.key = KeyOf(n);
    if (n % 2) m.parent = KeyOf(n + 1);
    m.raw_kv = n > 136;
    m.pin = n == 2;
    m.target_codec = CodecId::kZstd;
    m.payload = Bytes(n, n);
    m.state_record = Bytes(n % 3 == 0 ? 0 : 9, n + 7);
    CheckRoundTrip(m);
    m.prefix_tokens = static_cast<uint32_t>(n * 3);  // flag bit 2 + trailing u32
    EXPECT_EQ(m.Flags() & kPutFlagPrefixTokens, kPutFlagPrefixTokens);
    CheckRoundTrip(m);
  }
  CheckRoundTrip(PutReply{123456789});
  CheckRoundTrip(PutReply{123456789, ReplyMemory{7, 896, 130}});
  {  // the memory flag asks for the reply's memory fields
    PutRequest m;
    m.key = KeyOf(1);
    m.payload = Bytes(10, 1);
    m.memory = true;
    EXPECT_EQ(m.Flags(), kPutFlagMemory);
    CheckRoundTrip(m);
    // u64 stored, u32 raw_positions, u64 raw bytes, u64 state: 28 bytes.
    std::vector<uint8_t> reply;
    PutReply{5, ReplyMemory{1, 2, 3}}.Encode(&reply);
    EXPECT_EQ(reply.size(), 28u);
    EXPECT_STATUS(PutReply::Decode(0, reply), kCorruption);  // trailing bytes without the flag
    reply.pop_back();
    EXPECT_STATUS(PutReply::Decode(kReplyFlagMemory, reply), kCorruption);  // truncated
  }
  {  // the prefix_tokens flag with a zero value, or without its 4 bytes, is refused
    PutRequest m;
    m.key = KeyOf(1);
    m.payload = Bytes(10, 1);
    std::vector<uint8_t> body;
    m.Encode(&body);
    EXPECT_STATUS(PutRequest::Decode(kPutFlagPrefixTokens, body), kCorruption);
    body.insert(body.end(), {0, 0, 0, 0});
    EXPECT_STATUS(PutRequest::Decode(kPutFlagPrefixTokens, body), kCorruption);
  }
  PutRequest empty;
  std::vector<uint8_t> body;
  empty.Encode(&body);
  EXPECT_STATUS(PutRequest::Decode(0, body), kInvalidArgument);
}

TEST(MessagesTest, GetDeletePin) {
  CheckRoundTrip(GetRequest{KeyOf(1), true, false});
  CheckRoundTrip(GetRequest{KeyOf(2), false, true});
  for (size_t n : {0, 1, 136, 1000}) CheckRoundTrip(GetReply{Bytes(n, 1), Bytes(n / 2, 2)});
  CheckRoundTrip(GetRequest{KeyOf(2), true, true, true});
  for (size_t n : {0, 1, 136, 1000}) {
    // memory->state_bytes travels as the trailer's state size.
    GetReply m{Bytes(n, 1), Bytes(n / 2, 2), ReplyMemory{3, 384, n / 2}};
    CheckRoundTrip(m);
    std::vector<uint8_t> body;
    m.Encode(&body);
    EXPECT_EQ(body.size(), n + n / 2 + 20);  // + u32 + u64 memory + u32 + u32 sizes
    EXPECT_STATUS(GetReply::Decode(0, body), kCorruption);  // sizes disagree without the flag
    auto owned = GetReply::DecodeOwned(kReplyFlagMemory, std::move(body));
    ASSERT_OK(owned.status());
    EXPECT_EQ(*owned, m);
  }
  CheckRoundTrip(DeleteRequest{KeyOf(3)});
  CheckRoundTrip(DeleteReply{true});
  CheckRoundTrip(DeleteReply{false});
  CheckRoundTrip(PinRequest{KeyOf(4), true});
  CheckRoundTrip(PinRequest{KeyOf(4), false});
  CheckRoundTrip(PinReply{});
}

TEST(MessagesTest, StatsAndPingAreFreeForm) {
  CheckRoundTrip(StatsRequest{});
  CheckRoundTrip(StatsReply{R"({"lookups":1})"}, false);
  CheckRoundTrip(StatsReply{""}, false);
  for (size_t n : {0, 1, 65536}) CheckRoundTrip(PingMessage{Bytes(n, 5)}, false);
  EXPECT_STATUS(PingMessage::Decode(0, Bytes(65537, 1)), kInvalidArgument);
}

TEST(MessagesTest, UnknownFlagBitsAreRejected) {
  std::vector<uint8_t> body;
  GetRequest{KeyOf(1)}.Encode(&body);
  EXPECT_STATUS(GetRequest::Decode(1u << 5, body), kInvalidArgument);
  body.clear();
  PinRequest{KeyOf(1)}.Encode(&body);
  EXPECT_STATUS(PinRequest::Decode(2, body), kInvalidArgument);
  EXPECT_STATUS(HelloRequest::Decode(1, {}), kInvalidArgument);
}

TEST(MessagesTest, PutParentFlagMustBeZeroOrOne) {
  PutRequest m;
  m.payload = {1};
  std::vector<uint8_t> body;
  m.Encode(&body);
  body[16] = 2;
  EXPECT_STATUS(PutRequest::Decode(0, body), kCorruption);
}

}  // namespace
}  // namespace kvstash::protocol
