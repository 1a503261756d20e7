// Fuzzes the protocol's byte-facing code (protocol/): the FrameParser state
// machine fed the input in pieces whose sizes come from the input itself, and every
// message decoder on each completed frame body. Any input must give kBad / a Status,
// never a crash, leak or UB; a body that decodes must re-encode to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "protocol/frame_parser.h"
#include "protocol/messages.h"

namespace {

using namespace kvstash::protocol;

template <typename T>
void CheckBody(uint16_t flags, std::span<const uint8_t> body) {
  auto m = T::Decode(flags, body);
  if (!m.ok()) return;
  std::vector<uint8_t> again;
  m->Encode(&again);
  if (m->Flags() != flags || again.size() != body.size() ||
      !std::equal(again.begin(), again.end(), body.begin())) {
    std::abort();  // a body we accept must be exactly what we would write
  }
}

void CheckFrame(const Frame& f) {
  const uint16_t flags = f.header.flags;
  const std::span<const uint8_t> body(f.body);
  switch (static_cast<Opcode>(f.header.opcode)) {
    case Opcode::kHello: CheckBody<HelloRequest>(flags, body); CheckBody<HelloReply>(flags, body); break;
    case Opcode::kLookup: CheckBody<LookupRequest>(flags, body); CheckBody<LookupReply>(flags, body); break;
    case Opcode::kPut: CheckBody<PutRequest>(flags, body); CheckBody<PutReply>(flags, body); break;
    case Opcode::kGet: CheckBody<GetRequest>(flags, body); CheckBody<GetReply>(flags, body); break;
    case Opcode::kDelete: CheckBody<DeleteRequest>(flags, body); CheckBody<DeleteReply>(flags, body); break;
    case Opcode::kPin: CheckBody<PinRequest>(flags, body); CheckBody<PinReply>(flags, body); break;
    case Opcode::kStats: CheckBody<StatsRequest>(flags, body); CheckBody<StatsReply>(flags, body); break;
    case Opcode::kPing: CheckBody<PingMessage>(flags, body); break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // First byte: piece size for feeding (1..256), so splits are explored too.
  const size_t piece = static_cast<size_t>(data[0]) + 1;
  std::span<const uint8_t> in(data + 1, size - 1);
  FrameParser parser(1u << 16, FrameParser::Direction::kRequests);
  size_t pos = 0;
  while (pos < in.size()) {
    std::span<const uint8_t> chunk = in.subspan(pos, std::min(piece, in.size() - pos));
    size_t off = 0;
    while (off < chunk.size()) {
      size_t used = 0;
      const auto outcome = parser.Feed(chunk.subspan(off), &used);
      off += used;
      if (outcome == FrameParser::Outcome::kBad) {
        if (parser.error().ok()) std::abort();
        return 0;
      }
      if (outcome == FrameParser::Outcome::kComplete) CheckFrame(parser.TakeFrame());
      else if (off != chunk.size()) std::abort();  // kNeedMore must consume everything
    }
    pos += chunk.size();
  }
  return 0;
}
