#include "protocol/messages.h"

#include <string>

#include "common/byte_io.h"

namespace kvstash::protocol {
namespace {

// Parsing helper: every read failure becomes one Corruption naming the message.
class BodyReader {
 public:
  BodyReader(const char* what, std::span<const uint8_t> body) : what_(what), r_(body) {}
  bool U8(uint8_t* v) { return Ok(r_.U8(v)); }
  bool U16(uint16_t* v) { return Ok(r_.U16(v)); }
  bool U32(uint32_t* v) { return Ok(r_.U32(v)); }
  bool U64(uint64_t* v) { return Ok(r_.U64(v)); }
  bool Key(StoredKey* k) {
    std::span<const uint8_t> s;
    if (!Ok(r_.Take(k->size(), &s))) return false;
    std::copy(s.begin(), s.end(), k->begin());
    return true;
  }
  bool Bytes(uint64_t n, std::vector<uint8_t>* out) {
    std::span<const uint8_t> s;
    if (!Ok(r_.Take(n, &s))) return false;
    out->assign(s.begin(), s.end());
    return true;
  }
  bool String(uint64_t n, std::string* out) {
    std::span<const uint8_t> s;
    if (!Ok(r_.Take(n, &s))) return false;
    out->assign(s.begin(), s.end());
    return true;
  }
  // Ok if every byte was read and nothing failed, else Corruption.
  Status Finish() const {
    if (failed_) return Status::Corruption(std::string(what_) + " body is truncated");
    if (r_.remaining() != 0) {
      return Status::Corruption(std::string(what_) + " body has " +
                                std::to_string(r_.remaining()) + " trailing bytes");
    }
    return Status::Ok();
  }
  bool failed() const { return failed_; }

 private:
  bool Ok(bool ok) {
    failed_ |= !ok;
    return ok;
  }
  const char* what_;
  ByteReader r_;
  bool failed_ = false;
};

Status CheckFlags(const char* what, uint16_t flags, uint16_t known) {
  if ((flags & ~known) != 0) {
    return Status::InvalidArgument(std::string(what) + " has unknown flag bits " +
                                   std::to_string(flags & ~known));
  }
  return Status::Ok();
}

void PutKey(ByteWriter& w, const StoredKey& k) { w.Bytes(std::span<const uint8_t>(k)); }

Result<StoredKey> DecodeKeyOnly(const char* what, uint16_t flags, uint16_t known,
                                std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags(what, flags, known));
  BodyReader r(what, body);
  StoredKey k{};
  r.Key(&k);
  KVSTASH_RETURN_IF_ERROR(r.Finish());
  return k;
}

}  // namespace

// ---------------------------------------------------------------- HELLO
void HelloRequest::Encode(std::vector<uint8_t>* body) const {
  ByteWriter w(body);
  w.U16(protocol_version);
  w.U8(static_cast<uint8_t>(tenant.size()));
  w.Bytes(tenant);
  w.U16(static_cast<uint16_t>(credential.size()));
  w.Bytes(credential);
  w.U8(static_cast<uint8_t>(client_name.size()));
  w.Bytes(client_name);
}

Result<HelloRequest> HelloRequest::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("HELLO", flags, 0));
  BodyReader r("HELLO", body);
  HelloRequest m;
  uint8_t tenant_len = 0, name_len = 0;
  uint16_t cred_len = 0;
  r.U16(&m.protocol_version) && r.U8(&tenant_len) && r.String(tenant_len, &m.tenant) &&
      r.U16(&cred_len) && r.String(cred_len, &m.credential) && r.U8(&name_len) &&
      r.String(name_len, &m.client_name);
  KVSTASH_RETURN_IF_ERROR(r.Finish());
  if (m.tenant.empty()) return Status::InvalidArgument("HELLO tenant is empty");
  if (m.credential.size() > kMaxCredentialBytes) {
    return Status::InvalidArgument("HELLO credential longer than 4096 bytes");
  }
  return m;
}

void HelloReply::Encode(std::vector<uint8_t>* body) const {
  ByteWriter w(body);
  w.U16(protocol_version);
  w.U32(max_frame_body_bytes);
  w.U32(max_in_flight);
  w.U8(static_cast<uint8_t>(server_id.size()));
  w.Bytes(server_id);
}

Result<HelloReply> HelloReply::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("HELLO reply", flags, 0));
  BodyReader r("HELLO reply", body);
  HelloReply m;
  uint8_t id_len = 0;
  r.U16(&m.protocol_version) && r.U32(&m.max_frame_body_bytes) && r.U32(&m.max_in_flight) &&
      r.U8(&id_len) && r.String(id_len, &m.server_id);
  KVSTASH_RETURN_IF_ERROR(r.Finish());
  return m;
}

// ---------------------------------------------------------------- LOOKUP
void LookupRequest::Encode(std::vector<uint8_t>* body) const {
  ByteWriter w(body);
  w.U32(static_cast<uint32_t>(keys.size()));
  for (const LookupKey& k : keys) {
    PutKey(w, k.key);
    w.U32(k.tokens);
  }
}

Result<LookupRequest> LookupRequest::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("LOOKUP", flags, kLookupFlagRequireState));
  BodyReader r("LOOKUP", body);
  LookupRequest m;
  m.require_state = (flags & kLookupFlagRequireState) != 0;
  uint32_t n = 0;
  if (!r.U32(&n)) return r.Finish();
  if (n > kMaxLookupKeys) {
    return Status::InvalidArgument("LOOKUP of " + std::to_string(n) +
                                   " keys exceeds the limit of 65536");
  }
  if (body.size() != 4 + 20ull * n) return Status::Corruption("LOOKUP body size disagrees with its key count");
  m.keys.resize(n);
  for (LookupKey& k : m.keys) r.Key(&k.key) && r.U32(&k.tokens);
  KVSTASH_RETURN_IF_ERROR(r.Finish());
  return m;
}

void LookupReply::Encode(std::vector<uint8_t>* body) const {
  ByteWriter w(body);
  w.U32(matched_chunks);
  w.U64(matched_tokens);
}

Result<LookupReply> LookupReply::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("LOOKUP reply", flags, 0));
  BodyReader r("LOOKUP reply", body);
  LookupReply m;
  r.U32(&m.matched_chunks) && r.U64(&m.matched_tokens);
  KVSTASH_RETURN_IF_ERROR(r.Finish());
  return m;
}

// ---------------------------------------------------------------- PUT
uint16_t PutRequest::Flags() const {
  return static_cast<uint16_t>((raw_kv ? kPutFlagRawKv : 0) | (pin ? kPutFlagPin : 0) |
                               (prefix_tokens != 0 ? kPutFlagPrefixTokens : 0) |
                               (memory ? kPutFlagMemory : 0));
}

void PutRequest::Encode(std::vector<uint8_t>* body) const {
  ByteWriter w(body);
  body->reserve(body->size() + 48 + state_record.size() + payload.size());
  PutKey(w, key);
  w.U8(parent.has_value() ? 1 : 0);
  if (parent) PutKey(w, *parent);
  w.U16(static_cast<uint16_t>(target_codec));
  w.U32(static_cast<uint32_t>(state_record.size()));
  w.Bytes(state_record);
  w.U32(static_cast<uint32_t>(payload.size()));
  w.Bytes(payload);
  if (prefix_tokens != 0) w.U32(prefix_tokens);
}

Result<PutRequest> PutRequest::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(
      CheckFlags("PUT", flags,
                 kPutFlagRawKv | kPutFlagPin | kPutFlagPrefixTokens | kPutFlagMemory));
  BodyReader r("PUT", body);
  PutRequest m;
  m.raw_kv = (flags & kPutFlagRawKv) != 0;
  m.pin = (flags & kPutFlagPin) != 0;
  m.memory = (flags & kPutFlagMemory) != 0;
  uint8_t has_parent = 0;
  uint16_t codec = 0;
  uint32_t state_len = 0, payload_len = 0;
  if (r.Key(&m.key) && r.U8(&has_parent)) {
    if (has_parent > 1) return Status::Corruption("PUT parent flag is not 0 or 1");
    if (has_parent == 1) {
      m.parent.emplace();
      r.Key(&*m.parent);
    }
    r.U16(&codec) && r.U32(&state_len) && r.Bytes(state_len, &m.state_record) &&
        r.U32(&payload_len) && r.Bytes(payload_len, &m.payload);
    if ((flags & kPutFlagPrefixTokens) != 0) r.U32(&m.prefix_tokens);
  }
  KVSTASH_RETURN_IF_ERROR(r.Finish());
  if ((flags & kPutFlagPrefixTokens) != 0 && m.prefix_tokens == 0) {
    return Status::Corruption("PUT prefix_tokens flag with prefix_tokens 0");
  }
  m.target_codec = static_cast<CodecId>(codec);
  if (m.payload.empty()) return Status::InvalidArgument("PUT without a payload");
  return m;
}

void PutReply::Encode(std::vector<uint8_t>* body) const {
  ByteWriter w(body);
  w.U64(stored_bytes);
  if (memory) {
    w.U32(memory->raw_positions);
    w.U64(memory->raw_position_bytes);
    w.U64(memory->state_bytes);
  }
}

Result<PutReply> PutReply::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("PUT reply", flags, kReplyFlagMemory));
  BodyReader r("PUT reply", body);
  PutReply m;
  r.U64(&m.stored_bytes);
  if ((flags & kReplyFlagMemory) != 0) {
    m.memory.emplace();
    r.U32(&m.memory->raw_positions) && r.U64(&m.memory->raw_position_bytes) &&
        r.U64(&m.memory->state_bytes);
  }
  KVSTASH_RETURN_IF_ERROR(r.Finish());
  return m;
}

// ---------------------------------------------------------------- GET
uint16_t GetRequest::Flags() const {
  return static_cast<uint16_t>((decoded ? kGetFlagDecoded : 0) |
                               (with_state ? kGetFlagWithState : 0) |
                               (memory ? kGetFlagMemory : 0));
}

void GetRequest::Encode(std::vector<uint8_t>* body) const {
  ByteWriter w(body);
  PutKey(w, key);
}

Result<GetRequest> GetRequest::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_ASSIGN_OR_RETURN(StoredKey k,
                           DecodeKeyOnly("GET", flags,
                                         kGetFlagDecoded | kGetFlagWithState | kGetFlagMemory,
                                         body));
  GetRequest m;
  m.key = k;
  m.decoded = (flags & kGetFlagDecoded) != 0;
  m.with_state = (flags & kGetFlagWithState) != 0;
  m.memory = (flags & kGetFlagMemory) != 0;
  return m;
}

void GetReply::Encode(std::vector<uint8_t>* body) const {
  ByteWriter w(body);
  body->reserve(body->size() + 20 + payload.size() + state_record.size());
  w.Bytes(payload);
  w.Bytes(state_record);
  if (memory) {
    w.U32(memory->raw_positions);
    w.U64(memory->raw_position_bytes);
  }
  w.U32(static_cast<uint32_t>(state_record.size()));
  w.U32(static_cast<uint32_t>(payload.size()));
}

namespace {
// Bytes of the memory fields of a GET reply body (kReplyFlagMemory).
constexpr size_t kGetMemoryBytes = 12;

// Sizes of a GET reply body from its trailer. Errors: Corruption.
Status GetReplySizes(uint16_t flags, std::span<const uint8_t> body, uint32_t* payload_len,
                     uint32_t* state_len) {
  const size_t extra = (flags & kReplyFlagMemory) != 0 ? kGetMemoryBytes : 0;
  if (body.size() < 8 + extra) return Status::Corruption("GET reply body is truncated");
  *state_len = LoadLe<uint32_t>(body.data() + body.size() - 8);
  *payload_len = LoadLe<uint32_t>(body.data() + body.size() - 4);
  if (uint64_t{*payload_len} + *state_len + 8 + extra != body.size()) {
    return Status::Corruption("GET reply sizes disagree with its body size");
  }
  return Status::Ok();
}

// Reads the memory fields after payload and state; they describe `state_len` state bytes.
std::optional<ReplyMemory> GetReplyMemory(uint16_t flags, std::span<const uint8_t> body,
                                          size_t at, uint32_t state_len) {
  if ((flags & kReplyFlagMemory) == 0) return std::nullopt;
  ReplyMemory m;
  m.raw_positions = LoadLe<uint32_t>(body.data() + at);
  m.raw_position_bytes = LoadLe<uint64_t>(body.data() + at + 4);
  m.state_bytes = state_len;
  return m;
}
}  // namespace

Result<GetReply> GetReply::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("GET reply", flags, kReplyFlagMemory));
  uint32_t payload_len = 0, state_len = 0;
  KVSTASH_RETURN_IF_ERROR(GetReplySizes(flags, body, &payload_len, &state_len));
  GetReply m;
  m.payload.assign(body.begin(), body.begin() + payload_len);
  m.state_record.assign(body.begin() + payload_len, body.begin() + payload_len + state_len);
  m.memory = GetReplyMemory(flags, body, size_t{payload_len} + state_len, state_len);
  return m;
}

Result<GetReply> GetReply::DecodeOwned(uint16_t flags, std::vector<uint8_t>&& body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("GET reply", flags, kReplyFlagMemory));
  uint32_t payload_len = 0, state_len = 0;
  KVSTASH_RETURN_IF_ERROR(GetReplySizes(flags, body, &payload_len, &state_len));
  GetReply m;
  m.state_record.assign(body.begin() + payload_len, body.begin() + payload_len + state_len);
  m.memory = GetReplyMemory(flags, body, size_t{payload_len} + state_len, state_len);
  body.resize(payload_len);
  m.payload = std::move(body);
  return m;
}

// ---------------------------------------------------------------- DELETE, PIN
void DeleteRequest::Encode(std::vector<uint8_t>* body) const {
  ByteWriter w(body);
  PutKey(w, key);
}

Result<DeleteRequest> DeleteRequest::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_ASSIGN_OR_RETURN(StoredKey k, DecodeKeyOnly("DELETE", flags, 0, body));
  return DeleteRequest{k};
}

void DeleteReply::Encode(std::vector<uint8_t>* body) const {
  ByteWriter(body).U8(existed ? 1 : 0);
}

Result<DeleteReply> DeleteReply::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("DELETE reply", flags, 0));
  BodyReader r("DELETE reply", body);
  uint8_t existed = 0;
  r.U8(&existed);
  KVSTASH_RETURN_IF_ERROR(r.Finish());
  if (existed > 1) return Status::Corruption("DELETE reply flag is not 0 or 1");
  return DeleteReply{existed == 1};
}

void PinRequest::Encode(std::vector<uint8_t>* body) const {
  ByteWriter w(body);
  PutKey(w, key);
}

Result<PinRequest> PinRequest::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_ASSIGN_OR_RETURN(StoredKey k, DecodeKeyOnly("PIN", flags, kPinFlagPin, body));
  return PinRequest{k, (flags & kPinFlagPin) != 0};
}

Result<PinReply> PinReply::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("PIN reply", flags, 0));
  if (!body.empty()) return Status::Corruption("PIN reply body is not empty");
  return PinReply{};
}

// ---------------------------------------------------------------- STATS, PING
Result<StatsRequest> StatsRequest::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("STATS", flags, 0));
  if (!body.empty()) return Status::Corruption("STATS request body is not empty");
  return StatsRequest{};
}

void StatsReply::Encode(std::vector<uint8_t>* body) const { ByteWriter(body).Bytes(json); }

Result<StatsReply> StatsReply::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("STATS reply", flags, 0));
  return StatsReply{std::string(body.begin(), body.end())};
}

void PingMessage::Encode(std::vector<uint8_t>* body) const { ByteWriter(body).Bytes(data); }

Result<PingMessage> PingMessage::Decode(uint16_t flags, std::span<const uint8_t> body) {
  KVSTASH_RETURN_IF_ERROR(CheckFlags("PING", flags, 0));
  if (body.size() > kMaxPingBytes) return Status::InvalidArgument("PING body above 65536 bytes");
  return PingMessage{std::vector<uint8_t>(body.begin(), body.end())};
}

}  // namespace kvstash::protocol
