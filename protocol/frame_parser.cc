#include "protocol/frame_parser.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/byte_io.h"
#include "common/checksum.h"
#include "kvstash/prefix_key.h"
#include "protocol/messages.h"

namespace kvstash::protocol {

FrameParser::Outcome FrameParser::Fail(Status status, std::optional<FrameHeader> header) {
  state_ = State::kBad;
  error_ = std::move(status);
  bad_header_ = header;
  frame_ = Frame{};
  return Outcome::kBad;
}

FrameParser::Outcome FrameParser::HeaderDone() {
  Result<FrameHeader> h =
      DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes>(header_bytes_));
  if (!h.ok()) {
    // Another protocol version: magic and header CRC are good, so the request can be
    // answered NotSupported (in this version's framing) before the close.
    std::optional<FrameHeader> address;
    if (h.status().code() == Status::Code::kNotSupported && direction_ == Direction::kRequests &&
        IsRequestOpcode(header_bytes_[5])) {
      FrameHeader a;
      a.opcode = header_bytes_[5];
      a.request_id = LoadLe<uint64_t>(header_bytes_ + 8);
      address = a;
    }
    return Fail(h.status(), address);
  }
  const FrameHeader& hd = *h;
  const bool reply_expected = direction_ == Direction::kReplies;
  if (hd.is_reply() != reply_expected || !IsRequestOpcode(hd.opcode & ~kReplyBit)) {
    return Fail(Status::InvalidArgument("unexpected opcode 0x" +
                                        ToHex(std::span<const uint8_t>(&hd.opcode, 1)) +
                                        (reply_expected ? " (expected a reply)"
                                                        : " (expected a request)")),
                reply_expected ? std::nullopt : std::optional<FrameHeader>(hd));
  }
  if (!reply_expected && hd.status != 0) {
    return Fail(Status::Corruption("request frame has a nonzero status byte"), hd);
  }
  if (hd.body_bytes > max_body_bytes_) {
    return Fail(Status::ResourceExhausted("frame body of " + std::to_string(hd.body_bytes) +
                                          " bytes exceeds the limit of " +
                                          std::to_string(max_body_bytes_)),
                hd);
  }
  // PING's body bound is known from the header (HELLO's is kMaxUnauthenticatedBodyBytes,
  // the connection's limit until HELLO succeeds).
  if (!reply_expected && hd.opcode == static_cast<uint8_t>(Opcode::kPing) && hd.body_bytes > kMaxPingBytes) {
    return Fail(Status::ResourceExhausted("PING body of " + std::to_string(hd.body_bytes) +
                                          " bytes exceeds the limit of " + std::to_string(kMaxPingBytes)),
                hd);
  }
  if (hd.body_bytes == 0 && hd.body_crc32c != 0) {
    return Fail(Status::Corruption("empty frame body with a nonzero CRC32C"), hd);
  }
  frame_.header = hd;
  frame_.body.clear();
  body_have_ = 0;
  state_ = State::kBody;
  if (hd.body_bytes == 0) {
    state_ = State::kComplete;
    return Outcome::kComplete;
  }
  return Outcome::kNeedMore;
}

FrameParser::Outcome FrameParser::Feed(std::span<const uint8_t> in, size_t* consumed) {
  *consumed = 0;
  if (state_ == State::kBad) return Outcome::kBad;
  if (state_ == State::kComplete) return Outcome::kComplete;
  size_t pos = 0;
  while (pos < in.size()) {
    if (state_ == State::kHeader) {
      const size_t n = std::min(kFrameHeaderBytes - header_have_, in.size() - pos);
      std::memcpy(header_bytes_ + header_have_, in.data() + pos, n);
      header_have_ += n;
      pos += n;
      if (header_have_ < kFrameHeaderBytes) break;
      header_have_ = 0;
      const Outcome o = HeaderDone();
      *consumed = pos;
      if (o != Outcome::kNeedMore) return o;
    } else {  // kBody
      GrowBody();
      const size_t n = std::min(frame_.body.size() - body_have_, in.size() - pos);
      std::memcpy(frame_.body.data() + body_have_, in.data() + pos, n);
      body_have_ += n;
      pos += n;
      *consumed = pos;
      if (body_have_ == frame_.header.body_bytes) return BodyDone();
    }
  }
  *consumed = pos;
  return Outcome::kNeedMore;
}

void FrameParser::GrowBody() {
  const size_t size = frame_.body.size(), target = frame_.header.body_bytes;
  if (size == target || body_have_ < size) return;
  frame_.body.resize(std::min(target, std::max(2 * size, size + kBodyBufferStep)));
}

FrameParser::Outcome FrameParser::BodyDone() {
  if (Crc32c(frame_.body) != frame_.header.body_crc32c) {
    return Fail(Status::Corruption("frame body CRC32C mismatch"), frame_.header);
  }
  state_ = State::kComplete;
  return Outcome::kComplete;
}

std::span<uint8_t> FrameParser::BodyTail() {
  if (state_ != State::kBody) return {};
  GrowBody();
  return std::span<uint8_t>(frame_.body).subspan(body_have_);
}

FrameParser::Outcome FrameParser::CommitBody(size_t n) {
  if (state_ != State::kBody) return state_ == State::kBad ? Outcome::kBad : Outcome::kNeedMore;
  body_have_ += std::min(n, frame_.body.size() - body_have_);
  if (body_have_ == frame_.header.body_bytes) return BodyDone();
  return Outcome::kNeedMore;
}

Frame FrameParser::TakeFrame() {
  Frame f = std::move(frame_);
  frame_ = Frame{};
  state_ = State::kHeader;
  return f;
}

size_t FrameParser::bytes_wanted() const {
  switch (state_) {
    case State::kHeader: return kFrameHeaderBytes - header_have_;
    case State::kBody: return frame_.header.body_bytes - body_have_;
    default: return 0;
  }
}

}  // namespace kvstash::protocol
