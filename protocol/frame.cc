#include "protocol/frame.h"

#include <string>

#include "common/byte_io.h"
#include "common/checksum.h"

namespace kvstash::protocol {
namespace {
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffOpcode = 5, kOffFlags = 6,
                 kOffRequestId = 8, kOffBodyBytes = 16, kOffBodyCrc = 20, kOffStatus = 24,
                 kOffReserved = 25, kOffHeaderCrc = 28;
static_assert(kOffHeaderCrc + 4 == kFrameHeaderBytes);
}  // namespace

bool IsRequestOpcode(uint8_t raw) { return raw >= 1 && raw <= kNumOpcodes; }

std::string_view OpcodeName(uint8_t raw) {
  switch (static_cast<Opcode>(raw & ~kReplyBit)) {
    case Opcode::kHello: return "HELLO";
    case Opcode::kLookup: return "LOOKUP";
    case Opcode::kPut: return "PUT";
    case Opcode::kGet: return "GET";
    case Opcode::kDelete: return "DELETE";
    case Opcode::kPin: return "PIN";
    case Opcode::kStats: return "STATS";
    case Opcode::kPing: return "PING";
  }
  return "UNKNOWN";
}

void EncodeFrameHeader(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  StoreLe<uint32_t>(out + kOffMagic, kFrameMagic);
  out[kOffVersion] = h.version;
  out[kOffOpcode] = h.opcode;
  StoreLe<uint16_t>(out + kOffFlags, h.flags);
  StoreLe<uint64_t>(out + kOffRequestId, h.request_id);
  StoreLe<uint32_t>(out + kOffBodyBytes, h.body_bytes);
  StoreLe<uint32_t>(out + kOffBodyCrc, h.body_crc32c);
  out[kOffStatus] = h.status;
  out[kOffReserved] = out[kOffReserved + 1] = out[kOffReserved + 2] = 0;
  StoreLe<uint32_t>(out + kOffHeaderCrc, Crc32c(std::span<const uint8_t>(out, kOffHeaderCrc)));
}

Result<FrameHeader> DecodeFrameHeader(std::span<const uint8_t, kFrameHeaderBytes> bytes) {
  const uint8_t* b = bytes.data();
  if (LoadLe<uint32_t>(b + kOffMagic) != kFrameMagic) {
    return Status::Corruption("frame magic is not KVSF");
  }
  if (LoadLe<uint32_t>(b + kOffHeaderCrc) !=
      Crc32c(std::span<const uint8_t>(b, kOffHeaderCrc))) {
    return Status::Corruption("frame header CRC32C mismatch");
  }
  if (b[kOffReserved] != 0 || b[kOffReserved + 1] != 0 || b[kOffReserved + 2] != 0) {
    return Status::Corruption("frame header reserved bytes are not zero");
  }
  FrameHeader h;
  h.version = b[kOffVersion];
  if (h.version != kProtocolVersion) {
    return Status::NotSupported("frame protocol version " + std::to_string(h.version) +
                                " (this build speaks version 1)");
  }
  h.opcode = b[kOffOpcode];
  h.flags = LoadLe<uint16_t>(b + kOffFlags);
  h.request_id = LoadLe<uint64_t>(b + kOffRequestId);
  h.body_bytes = LoadLe<uint32_t>(b + kOffBodyBytes);
  h.body_crc32c = LoadLe<uint32_t>(b + kOffBodyCrc);
  h.status = b[kOffStatus];
  return h;
}

void AppendFrame(FrameHeader header, std::span<const uint8_t> body, std::vector<uint8_t>* out) {
  header.body_bytes = static_cast<uint32_t>(body.size());
  header.body_crc32c = body.empty() ? 0 : Crc32c(body);
  const size_t at = out->size();
  out->resize(at + kFrameHeaderBytes);
  EncodeFrameHeader(header, out->data() + at);
  out->insert(out->end(), body.begin(), body.end());
}

void AppendErrorReply(uint8_t request_opcode, uint64_t request_id, const Status& status,
                      std::vector<uint8_t>* out) {
  FrameHeader h;
  h.opcode = static_cast<uint8_t>(request_opcode | kReplyBit);
  h.request_id = request_id;
  h.status = static_cast<uint8_t>(status.code());
  const std::string& msg = status.message();
  AppendFrame(h, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(msg.data()), msg.size()),
              out);
}

}  // namespace kvstash::protocol
