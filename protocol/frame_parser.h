// FrameParser: a pure state machine that cuts a byte stream into protocol frames.
//
// It owns no socket: the caller feeds it whatever bytes arrived (any split, one byte
// at a time or many frames at once) and gets one of three outcomes, as asio's HTTP
// request_parser does:
//   kComplete  a whole, verified frame is ready (TakeFrame());
//   kNeedMore  every byte given was consumed and the frame is not finished;
//   kBad       the stream is not a valid frame sequence (error() says why). The parser
//              stays bad: a byte stream cannot be resynchronised after a bad frame, so
//              the connection answers with an error reply (when bad_header() is known)
//              and closes.
// Checks, in order: header magic, header CRC32C, reserved bytes, protocol version
// (decode errors of DecodeFrameHeader), opcode direction (requests on a server,
// replies on a client), a request's status byte is 0, body size <= max_body_bytes and,
// for a PING request, <= kMaxPingBytes (ResourceExhausted, decided from the header),
// body CRC32C (Corruption).
//
// Memory: at most one frame body (<= max_body_bytes) is buffered, and its buffer grows
// with the bytes that arrive (kBodyBufferStep, then doubling, never past the header's
// body size): a header that claims a large body costs memory only as the body comes,
// at most about twice the bytes received, never the claimed size up front.
// Thread-safety: one parser per connection; not shared.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "protocol/frame.h"

namespace kvstash::protocol {

class FrameParser {
 public:
  enum class Outcome { kNeedMore, kComplete, kBad };
  // First size of a body buffer, and the least it grows by (bytes).
  static constexpr size_t kBodyBufferStep = 64 * 1024;
  enum class Direction { kRequests, kReplies };

  // `max_body_bytes`: largest body accepted. `direction`: kRequests on a server.
  FrameParser(uint32_t max_body_bytes, Direction direction)
      : max_body_bytes_(max_body_bytes), direction_(direction) {}

  // Changes the largest body accepted, from the next frame header on (a server
  // accepts only small frames until a connection has said HELLO).
  void set_max_body_bytes(uint32_t max_body_bytes) { max_body_bytes_ = max_body_bytes; }
  uint32_t max_body_bytes() const { return max_body_bytes_; }
  // Consumes bytes from the front of `in`, stopping right after a frame completes (so
  // the rest of `in` belongs to the next frame); *consumed says how many were used.
  Outcome Feed(std::span<const uint8_t> in, size_t* consumed);

  // REQUIRES: the last Feed returned kComplete. Moves the frame out; the parser is
  // then ready for the next frame.
  Frame TakeFrame();

  // Zero-copy body reads: while a frame body is being received, BodyTail() is the
  // not-yet-filled rest of the body buffer (grown first when it is full; it may be
  // shorter than the rest of the body); a caller may read socket bytes straight into (a prefix of) it and then call
  // CommitBody(n). Same outcomes as Feed. BodyTail() is empty outside the body state.
  std::span<uint8_t> BodyTail();
  // REQUIRES: n <= BodyTail().size().
  Outcome CommitBody(size_t n);

  // After kBad: the reason (Corruption, NotSupported, ResourceExhausted,
  // InvalidArgument).
  const Status& error() const { return error_; }
  // After kBad: the header, when it was valid enough to address a reply to (also a
  // request header of another protocol version: its opcode and request id).
  const std::optional<FrameHeader>& bad_header() const { return bad_header_; }
  // Bytes still missing from the current frame part (header or body); a hint for
  // how much to read next.
  size_t bytes_wanted() const;
  bool is_bad() const { return state_ == State::kBad; }
  // True once some bytes of a frame arrived and until it completes (or goes bad).
  bool in_frame() const {
    return (state_ == State::kHeader && header_have_ > 0) || state_ == State::kBody;
  }
  // The body size of the frame being received, once its header was accepted; 0 before.
  uint32_t pending_body_bytes() const {
    return state_ == State::kBody ? frame_.header.body_bytes : 0;
  }
  // Bytes of the body buffer now allocated for the frame being received (0 outside
  // the body state): what a claimed body size has cost so far.
  size_t body_buffer_bytes() const { return state_ == State::kBody ? frame_.body.size() : 0; }

 private:
  enum class State { kHeader, kBody, kComplete, kBad };
  Outcome Fail(Status status, std::optional<FrameHeader> header);
  Outcome HeaderDone();
  Outcome BodyDone();
  // Grows a full body buffer while the body is not all buffered: to
  // max(2x, +kBodyBufferStep), at most the body size.
  void GrowBody();

  uint32_t max_body_bytes_;
  Direction direction_;
  State state_ = State::kHeader;
  uint8_t header_bytes_[kFrameHeaderBytes] = {};
  size_t header_have_ = 0;
  Frame frame_;
  size_t body_have_ = 0;
  Status error_;
  std::optional<FrameHeader> bad_header_;
};

}  // namespace kvstash::protocol
