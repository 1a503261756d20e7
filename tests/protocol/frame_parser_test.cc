// FrameParser: every split of a valid stream parses the same; every bad stream is
// reported as kBad with the documented status, and the parser stays bad.
#include "protocol/frame_parser.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/byte_io.h"
#include "common/checksum.h"
#include "tests/support/test_util.h"

namespace kvstash::protocol {
namespace {

using Outcome = FrameParser::Outcome;
using Direction = FrameParser::Direction;

std::vector<uint8_t> Body(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

std::vector<uint8_t> Request(Opcode op, uint64_t id, const std::vector<uint8_t>& body) {
  std::vector<uint8_t> out;
  AppendFrame(FrameHeader{.opcode = static_cast<uint8_t>(op), .request_id = id}, body, &out);
  return out;
}

// Feeds `stream` in pieces of `piece` bytes; returns the frames or stops at kBad.
std::vector<Frame> FeedAll(FrameParser& p, const std::vector<uint8_t>& stream, size_t piece,
                           Outcome* last) {
  std::vector<Frame> frames;
  size_t pos = 0;
  *last = Outcome::kNeedMore;
  while (pos < stream.size()) {
    const size_t n = std::min(piece, stream.size() - pos);
    std::span<const uint8_t> chunk(stream.data() + pos, n);
    size_t off = 0;
    while (off < n) {
      size_t used = 0;
      *last = p.Feed(chunk.subspan(off), &used);
      off += used;
      if (*last == Outcome::kBad) return frames;
      if (*last == Outcome::kComplete) frames.push_back(p.TakeFrame());
      else EXPECT_EQ(off, n);  // kNeedMore consumes everything
    }
    pos += n;
  }
  return frames;
}

TEST(FrameParserTest, BodySizeSweepAroundTheLimit) {
  constexpr uint32_t kLimit = 4096;
  for (size_t n : {0, 1, 2, 31, 32, 33, 1023, 4095, 4096}) {
    FrameParser p(kLimit, Direction::kRequests);
    const auto body = Body(n, static_cast<uint32_t>(n));
    Outcome last;
    auto frames = FeedAll(p, Request(Opcode::kPing, n + 1, body), 1 << 20, &last);
    ASSERT_EQ(frames.size(), 1u) << n;
    EXPECT_EQ(frames[0].body, body);
    EXPECT_EQ(frames[0].header.request_id, n + 1);
  }
  FrameParser p(kLimit, Direction::kRequests);
  Outcome last;
  auto frames = FeedAll(p, Request(Opcode::kPing, 1, Body(kLimit + 1, 1)), 1 << 20, &last);
  EXPECT_TRUE(frames.empty());
  EXPECT_EQ(last, Outcome::kBad);
  EXPECT_STATUS(p.error(), kResourceExhausted);
  ASSERT_TRUE(p.bad_header().has_value());
  EXPECT_EQ(p.bad_header()->request_id, 1u);
}

TEST(FrameParserTest, EverySplitOfAPipelinedStreamGivesTheSameFrames) {
  std::vector<uint8_t> stream;
  std::vector<std::vector<uint8_t>> bodies;
  for (int i = 0; i < 5; ++i) {
    bodies.push_back(Body(i * 37 % 101, i));
    auto f = Request(static_cast<Opcode>(1 + i % kNumOpcodes), 100 + i, bodies.back());
    stream.insert(stream.end(), f.begin(), f.end());
  }
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    FrameParser p(1024, Direction::kRequests);
    Outcome last;
    auto frames = FeedAll(p, stream, piece, &last);
    ASSERT_EQ(frames.size(), bodies.size()) << "piece " << piece;
    for (size_t i = 0; i < frames.size(); ++i) {
      EXPECT_EQ(frames[i].body, bodies[i]);
      EXPECT_EQ(frames[i].header.request_id, 100 + i);
    }
  }
}

TEST(FrameParserTest, CompleteStopsAtTheFrameBoundary) {
  auto a = Request(Opcode::kPing, 1, {1, 2, 3});
  auto b = Request(Opcode::kPing, 2, {4});
  std::vector<uint8_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  FrameParser p(64, Direction::kRequests);
  size_t used = 0;
  ASSERT_EQ(p.Feed(both, &used), Outcome::kComplete);
  EXPECT_EQ(used, a.size());
  // Feeding again before TakeFrame consumes nothing.
  size_t again = 7;
  EXPECT_EQ(p.Feed(std::span<const uint8_t>(both).subspan(used), &again), Outcome::kComplete);
  EXPECT_EQ(again, 0u);
  EXPECT_EQ(p.TakeFrame().header.request_id, 1u);
  EXPECT_EQ(p.bytes_wanted(), kFrameHeaderBytes);
  ASSERT_EQ(p.Feed(std::span<const uint8_t>(both).subspan(used), &used), Outcome::kComplete);
  EXPECT_EQ(p.TakeFrame().body, std::vector<uint8_t>{4});
}

TEST(FrameParserTest, BodyCorruptionIsBadWithTheHeaderKnown) {
  auto f = Request(Opcode::kPut, 77, Body(100, 3));
  f[kFrameHeaderBytes + 50] ^= 0x10;
  FrameParser p(1024, Direction::kRequests);
  Outcome last;
  EXPECT_TRUE(FeedAll(p, f, 7, &last).empty());
  EXPECT_EQ(last, Outcome::kBad);
  EXPECT_STATUS(p.error(), kCorruption);
  ASSERT_TRUE(p.bad_header());
  EXPECT_EQ(p.bad_header()->request_id, 77u);
  // Stays bad whatever follows.
  auto good = Request(Opcode::kPing, 1, {});
  size_t used = 9;
  EXPECT_EQ(p.Feed(good, &used), Outcome::kBad);
  EXPECT_EQ(used, 0u);
  EXPECT_TRUE(p.is_bad());
}

TEST(FrameParserTest, HeaderCorruptionIsBadWithoutAHeader) {
  auto f = Request(Opcode::kPing, 5, {});
  f[9] ^= 1;  // request id byte, covered by the header CRC
  FrameParser p(1024, Direction::kRequests);
  size_t used = 0;
  EXPECT_EQ(p.Feed(f, &used), Outcome::kBad);
  EXPECT_STATUS(p.error(), kCorruption);
  EXPECT_FALSE(p.bad_header());
}

TEST(FrameParserTest, AnotherVersionIsBadWithAnAddressForTheReply) {
  uint8_t h[kFrameHeaderBytes];
  EncodeFrameHeader({.version = 2, .opcode = 3, .request_id = 77, .body_bytes = 10}, h);
  FrameParser p(1024, Direction::kRequests);
  size_t used = 0;
  EXPECT_EQ(p.Feed(std::span<const uint8_t>(h), &used), Outcome::kBad);
  EXPECT_STATUS(p.error(), kNotSupported);
  ASSERT_TRUE(p.bad_header());
  EXPECT_EQ(p.bad_header()->opcode, 3);
  EXPECT_EQ(p.bad_header()->request_id, 77u);
  // A client parsing replies, or an unknown opcode: nothing to address.
  FrameParser replies(1024, Direction::kReplies);
  EncodeFrameHeader({.version = 2, .opcode = 3 | kReplyBit, .request_id = 77}, h);
  EXPECT_EQ(replies.Feed(std::span<const uint8_t>(h), &used), Outcome::kBad);
  EXPECT_FALSE(replies.bad_header());
  FrameParser unknown(1024, Direction::kRequests);
  EncodeFrameHeader({.version = 2, .opcode = 0x42, .request_id = 77}, h);
  EXPECT_EQ(unknown.Feed(std::span<const uint8_t>(h), &used), Outcome::kBad);
  EXPECT_FALSE(unknown.bad_header());
}

TEST(FrameParserTest, DirectionAndStatusRules) {
  std::vector<uint8_t> reply;
  AppendFrame(FrameHeader{.opcode = 0x88, .request_id = 3}, {}, &reply);
  {
    FrameParser p(64, Direction::kRequests);
    size_t used;
    EXPECT_EQ(p.Feed(reply, &used), Outcome::kBad);
    EXPECT_STATUS(p.error(), kInvalidArgument);
  }
  {
    FrameParser p(64, Direction::kReplies);
    size_t used;
    EXPECT_EQ(p.Feed(reply, &used), Outcome::kComplete);
  }
  std::vector<uint8_t> unknown_op;
  AppendFrame(FrameHeader{.opcode = 0x09}, {}, &unknown_op);
  FrameParser p(64, Direction::kRequests);
  size_t used;
  EXPECT_EQ(p.Feed(unknown_op, &used), Outcome::kBad);
  EXPECT_STATUS(p.error(), kInvalidArgument);
  ASSERT_TRUE(p.bad_header());  // a request we can answer with an error reply

  std::vector<uint8_t> with_status;
  AppendFrame(FrameHeader{.opcode = 0x08, .status = 2}, {}, &with_status);
  FrameParser q(64, Direction::kRequests);
  EXPECT_EQ(q.Feed(with_status, &used), Outcome::kBad);
  EXPECT_STATUS(q.error(), kCorruption);
}

TEST(FrameParserTest, EmptyBodyWithNonzeroCrcIsBad) {
  uint8_t b[kFrameHeaderBytes];
  EncodeFrameHeader(FrameHeader{.opcode = 8, .body_bytes = 0, .body_crc32c = 5}, b);
  FrameParser p(64, Direction::kRequests);
  size_t used;
  EXPECT_EQ(p.Feed(b, &used), Outcome::kBad);
  EXPECT_STATUS(p.error(), kCorruption);
}

TEST(FrameParserTest, ZeroCopyBodyReadsGiveTheSameFrame) {
  const auto body = Body(1000, 9);
  auto f = Request(Opcode::kPut, 3, body);
  FrameParser p(4096, Direction::kRequests);
  EXPECT_TRUE(p.BodyTail().empty());  // header not read yet
  size_t used = 0;
  ASSERT_EQ(p.Feed(std::span<const uint8_t>(f).first(40), &used), Outcome::kNeedMore);
  ASSERT_EQ(p.BodyTail().size(), 992u);  // 1000 - the 8 body bytes fed
  // Write the rest straight into the body buffer, in two pieces.
  std::memcpy(p.BodyTail().data(), f.data() + 40, 500);
  EXPECT_EQ(p.CommitBody(500), Outcome::kNeedMore);
  ASSERT_EQ(p.BodyTail().size(), 492u);
  std::memcpy(p.BodyTail().data(), f.data() + 540, 492);
  ASSERT_EQ(p.CommitBody(492), Outcome::kComplete);
  EXPECT_EQ(p.TakeFrame().body, body);
  // A corrupted body is caught the same way.
  f[kFrameHeaderBytes + 999] ^= 1;
  FrameParser q(4096, Direction::kRequests);
  ASSERT_EQ(q.Feed(std::span<const uint8_t>(f).first(kFrameHeaderBytes), &used), Outcome::kNeedMore);
  std::memcpy(q.BodyTail().data(), f.data() + kFrameHeaderBytes, 1000);
  EXPECT_EQ(q.CommitBody(1000), Outcome::kBad);
  EXPECT_STATUS(q.error(), kCorruption);
  EXPECT_TRUE(q.BodyTail().empty());
}

// Only the header of a frame claiming a 200 MiB body (under a 256 MiB limit) costs no
// more than one 64 KiB buffer; the buffer grows with what arrives (64 KiB, then
// doubling, exactly the body size at the end), through Feed and through BodyTail, and
// the frame is the same. Before, the parser allocated the claimed size from the header.
// Feeds `p` only the header of a frame claiming a `body_bytes` body (CRC 1).
Outcome FeedClaimingHeader(FrameParser& p, uint8_t opcode, uint64_t id, uint32_t body_bytes) {
  uint8_t head[kFrameHeaderBytes];
  EncodeFrameHeader({.opcode = opcode, .request_id = id, .body_bytes = body_bytes, .body_crc32c = 1}, head);
  size_t used = 0;
  return p.Feed(std::span<const uint8_t>(head), &used);
}

TEST(FrameParserTest, AClaimedBodyCostsMemoryOnlyAsItArrives) {
  constexpr size_t kStep = FrameParser::kBodyBufferStep;
  FrameParser p(256u << 20, Direction::kRequests);
  ASSERT_EQ(FeedClaimingHeader(p, static_cast<uint8_t>(Opcode::kPut), 7, 200u << 20), Outcome::kNeedMore);
  size_t used = 0;
  EXPECT_EQ(p.body_buffer_bytes(), 0u);  // nothing of the body yet
  EXPECT_EQ(p.pending_body_bytes(), 200u << 20);
  const std::vector<uint8_t> ten(10, 0xAB);
  ASSERT_EQ(p.Feed(ten, &used), Outcome::kNeedMore);
  EXPECT_EQ(p.body_buffer_bytes(), kStep);
  EXPECT_EQ(p.bytes_wanted(), (200u << 20) - 10);
  EXPECT_EQ(p.BodyTail().size(), kStep - 10);  // more than kStep - 10 left: no growth
  const std::vector<uint8_t> more(kStep, 0xCD);
  ASSERT_EQ(p.Feed(more, &used), Outcome::kNeedMore);
  EXPECT_EQ(p.body_buffer_bytes(), 2 * kStep);

  // A whole 1 MiB + 3 body, half fed in 1,000-byte pieces and half read through
  // BodyTail: the buffer ends at the body size exactly and the frame is the same.
  const auto body = Body((1u << 20) + 3, 5);
  const auto f = Request(Opcode::kPut, 9, body);
  FrameParser q(256u << 20, Direction::kRequests);
  size_t pos = 0;
  Outcome last = Outcome::kNeedMore;
  while (pos < kFrameHeaderBytes + body.size() / 2) {
    const size_t n = std::min<size_t>(1000, f.size() - pos);
    ASSERT_EQ(q.Feed(std::span<const uint8_t>(f).subspan(pos, n), &used), Outcome::kNeedMore);
    pos += used;
    EXPECT_LE(q.body_buffer_bytes(), std::max(2 * (pos - kFrameHeaderBytes), kStep));
  }
  while (last == Outcome::kNeedMore) {
    std::span<uint8_t> tail = q.BodyTail();
    ASSERT_FALSE(tail.empty());
    const size_t n = std::min(tail.size(), f.size() - pos);
    std::memcpy(tail.data(), f.data() + pos, n);
    pos += n;
    last = q.CommitBody(n);
    if (last == Outcome::kNeedMore) {
      EXPECT_LE(q.body_buffer_bytes(), body.size());
    }
  }
  ASSERT_EQ(last, Outcome::kComplete);
  EXPECT_EQ(pos, f.size());
  const Frame got = q.TakeFrame();
  EXPECT_EQ(got.body, body);
  EXPECT_EQ(got.body.size(), body.size());
}

// A PING header claiming more than 65,536 body bytes is refused from the header alone
// (ResourceExhausted, addressed to the request), before any body byte is buffered.
TEST(FrameParserTest, PingAboveItsLimitIsBadFromTheHeader) {
  for (uint32_t n : {65536u, 65537u, 200u << 20}) {
    SCOPED_TRACE(n);
    FrameParser p(256u << 20, Direction::kRequests);
    const Outcome o = FeedClaimingHeader(p, static_cast<uint8_t>(Opcode::kPing), 3, n);
    if (n == 65536u) {
      EXPECT_EQ(o, Outcome::kNeedMore);
      continue;
    }
    ASSERT_EQ(o, Outcome::kBad);
    EXPECT_STATUS(p.error(), kResourceExhausted);
    ASSERT_TRUE(p.bad_header().has_value());
    EXPECT_EQ(p.bad_header()->request_id, 3u);
    EXPECT_EQ(p.body_buffer_bytes(), 0u);
  }
  // Replies are not limited so (a PING reply echoes a request body the client sent).
  FrameParser c(256u << 20, Direction::kReplies);
  EXPECT_EQ(FeedClaimingHeader(c, static_cast<uint8_t>(Opcode::kPing) | kReplyBit, 4, 70000), Outcome::kNeedMore);
}

TEST(FrameParserTest, BytesWantedTracksProgress) {
  auto f = Request(Opcode::kPing, 1, Body(10, 1));
  FrameParser p(64, Direction::kRequests);
  size_t used;
  EXPECT_EQ(p.bytes_wanted(), 32u);
  EXPECT_EQ(p.Feed(std::span<const uint8_t>(f).first(20), &used), Outcome::kNeedMore);
  EXPECT_EQ(p.bytes_wanted(), 12u);
  EXPECT_EQ(p.Feed(std::span<const uint8_t>(f).subspan(20, 15), &used), Outcome::kNeedMore);
  EXPECT_EQ(p.bytes_wanted(), 7u);
}

}  // namespace
}  // namespace kvstash::protocol
