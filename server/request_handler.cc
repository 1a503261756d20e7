#include "server/request_handler.h"

#include <chrono>

#include "common/byte_io.h"
#include "common/checksum.h"
#include "common/logging.h"
#include "kvstash/payload_format.h"
#include "protocol/messages.h"
#include "server/payload_memory.h"

namespace kvstash::server {
namespace {

using protocol::Frame;
using protocol::Opcode;

// Reply bodies are built after kFrameHeaderBytes of room for the frame header, so the
// finished frame is the same buffer (no copy of large GET payloads).
std::vector<uint8_t> ReplyBuffer(size_t body_capacity) {
  std::vector<uint8_t> b;
  b.reserve(protocol::kFrameHeaderBytes + body_capacity);
  b.resize(protocol::kFrameHeaderBytes);
  return b;
}

// Offset of the flags field in the frame header (docs/protocol.md §2).
constexpr size_t kFlagsOffset = 6;

// The reply's flags wait in the header room (at the flags field) until FinishOkReply.
template <typename Reply>
std::vector<uint8_t> Body(const Reply& r) {
  std::vector<uint8_t> b = ReplyBuffer(64);
  StoreLe<uint16_t>(b.data() + kFlagsOffset, r.Flags());
  r.Encode(&b);
  return b;
}

// Fills the header room of `frame` (ReplyBuffer + body, flags set by Body) for a
// successful reply.
void FinishOkReply(const Frame& request, std::vector<uint8_t>* frame) {
  protocol::FrameHeader h;
  h.flags = LoadLe<uint16_t>(frame->data() + kFlagsOffset);
  h.opcode = static_cast<uint8_t>(request.header.opcode | protocol::kReplyBit);
  h.request_id = request.header.request_id;
  const std::span<const uint8_t> body(frame->data() + protocol::kFrameHeaderBytes,
                                      frame->size() - protocol::kFrameHeaderBytes);
  h.body_bytes = static_cast<uint32_t>(body.size());
  h.body_crc32c = body.empty() ? 0 : Crc32c(body);
  protocol::EncodeFrameHeader(h, frame->data());
}

uint64_t CanonicalBytes(const PayloadHeader& h) {
  return h.layout.DataBytes(h.tokens) + h.layout.NumScales() * sizeof(float);
}

// Checks that a codec-kRaw payload's body is exactly a canonical chunk.
Status CheckRawBody(const PayloadView& p) {
  if (p.body.size() != CanonicalBytes(p.header)) {
    return Status::Corruption("raw payload body of " + std::to_string(p.body.size()) +
                              " bytes, its layout needs " +
                              std::to_string(CanonicalBytes(p.header)));
  }
  if (Xxh3_64(p.body) != p.header.content_checksum) {
    return Status::Corruption("raw payload content checksum mismatch");
  }
  return Status::Ok();
}

// A PUT's payload must be bound (format version 2) to the key it is PUT under.
Status CheckPutKey(const PayloadHeader& h, const StoredKey& key) {
  if (!h.chunk_key) {
    return Status::InvalidArgument(
        "PUT payload: format version 1 is not bound to a chunk key; bind it to the PUT's key "
        "(format version 2, docs/format/payload.md)");
  }
  if (*h.chunk_key != key) {
    return Status::InvalidArgument("PUT payload is bound to key " + ToHex(*h.chunk_key) +
                                   ", not to the PUT's key " + ToHex(key));
  }
  return Status::Ok();
}

// A store error names keys as the store knows them: tenant-scoped. A client must only
// ever see its own keys, so each scoped key in the message is replaced by the client's
// key it came from (and any other 32-hex-digit key is not the client's business:
// there is none, as the store only names keys it was given).
Status Unscope(Status s, std::initializer_list<std::pair<StoredKey, StoredKey>> scoped_to_client) {
  if (s.ok()) return s;
  std::string msg = s.message();
  for (const auto& [scoped, client] : scoped_to_client) {
    const std::string from = ToHex(scoped), to = ToHex(client);
    for (size_t at = msg.find(from); at != std::string::npos; at = msg.find(from, at + to.size())) {
      msg.replace(at, from.size(), to);
    }
  }
  return Status::FromCode(static_cast<uint8_t>(s.code()), msg);
}

// `bytes` in MiB, rounded up, for messages ("64 MiB").
std::string Mib(uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

}  // namespace

RequestHandler::RequestHandler(ChunkStore* store, const TenantTable* tenants, Metrics* metrics,
                               HandlerLimits limits, const TenantCodecs* codecs)
    : store_(store),
      tenants_(tenants),
      metrics_(metrics),
      limits_(std::move(limits)),
      codecs_(codecs) {
  for (const std::string& name : tenants_->names()) {
    tenant_metrics_.emplace(name, std::make_unique<Metrics>());
  }
}

bool RequestHandler::HandleHello(const Frame& f, std::string* tenant, std::vector<uint8_t>* out) {
  const auto t0 = std::chrono::steady_clock::now();
  // Server-wide every HELLO; a tenant's STATS counts its successful HELLOs (a failed
  // one has not proven it is that tenant).
  auto finish = [&](bool ok) {
    const uint64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - t0).count();
    if (ok) Record(*tenant, [&](Metrics& m) { m.RecordRequest(Opcode::kHello, us, true); });
    else metrics_->RecordRequest(Opcode::kHello, us, false);
    return ok;
  };
  auto req = protocol::HelloRequest::Decode(f.header.flags, f.body);
  if (!req.ok()) {
    protocol::AppendErrorReply(f.header.opcode, f.header.request_id, req.status(), out);
    return finish(false);
  }
  if (req->protocol_version < protocol::kProtocolVersion) {
    protocol::AppendErrorReply(f.header.opcode, f.header.request_id,
                               Status::NotSupported("protocol version " +
                                                    std::to_string(req->protocol_version) +
                                                    " is older than this server's 1"),
                               out);
    return finish(false);
  }
  if (Status s = tenants_->Authenticate(req->tenant, req->credential); !s.ok()) {
    metrics_->RecordAuthFailure();
    KVSTASH_LOG_WARN("HELLO from client \"{}\" for tenant \"{}\" rejected", req->client_name,
                     req->tenant);
    protocol::AppendErrorReply(f.header.opcode, f.header.request_id, s, out);
    return finish(false);
  }
  *tenant = req->tenant;
  protocol::HelloReply reply{protocol::kProtocolVersion, limits_.max_frame_bytes,
                             limits_.max_in_flight, limits_.server_id};
  std::vector<uint8_t> frame = Body(reply);
  FinishOkReply(f, &frame);
  out->insert(out->end(), frame.begin(), frame.end());
  return finish(true);
}

std::vector<uint8_t> Reply::Flatten() const {
  std::vector<uint8_t> all(head);
  if (shared) all.insert(all.end(), shared->begin(), shared->end());
  all.insert(all.end(), tail.begin(), tail.end());
  return all;
}

Reply RequestHandler::Handle(const std::string& tenant, const Frame& f) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto op = static_cast<Opcode>(f.header.opcode);
  Reply reply;
  Status status;
  if (op == Opcode::kGet && !tenant.empty()) {
    Result<Reply> r = DoGet(tenant, f);
    status = r.status();
    if (r.ok()) reply = std::move(r).value();
  } else {
    Result<std::vector<uint8_t>> body = Dispatch(tenant, f);
    status = body.status();
    if (body.ok()) {
      FinishOkReply(f, &*body);
      reply.head = std::move(body).value();
    }
  }
  if (!status.ok()) {
    protocol::AppendErrorReply(f.header.opcode, f.header.request_id, status, &reply.head);
  }
  // A GET miss is an answer, not a server error.
  const bool ok = status.ok() || (op == Opcode::kGet && status.IsNotFound());
  const uint64_t us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - t0).count();
  Record(tenant, [&](Metrics& m) { m.RecordRequest(op, us, ok); });
  return reply;
}

Result<std::vector<uint8_t>> RequestHandler::Dispatch(const std::string& tenant, const Frame& f) {
  const auto op = static_cast<Opcode>(f.header.opcode);
  if (op == Opcode::kPing) {
    KVSTASH_ASSIGN_OR_RETURN(auto ping, protocol::PingMessage::Decode(f.header.flags, f.body));
    return Body(ping);
  }
  if (tenant.empty()) {
    return Status::PermissionDenied(std::string(protocol::OpcodeName(f.header.opcode)) +
                                    " before a successful HELLO");
  }
  switch (op) {
    case Opcode::kHello: return Status::InvalidArgument("HELLO sent twice on one connection");
    case Opcode::kLookup: return DoLookup(tenant, f);
    case Opcode::kPut: return DoPut(tenant, f);
    case Opcode::kGet: return Status::Internal("GET is answered by Handle (shared payload)");
    case Opcode::kDelete: return DoDelete(tenant, f);
    case Opcode::kPin: return DoPin(tenant, f);
    case Opcode::kStats: {
      KVSTASH_RETURN_IF_ERROR(protocol::StatsRequest::Decode(f.header.flags, f.body).status());
      // Never throws on a string that is not UTF-8 (U+FFFD instead): an exception
      // here would end the worker thread, and with it the process.
      return Body(protocol::StatsReply{
          TenantStatsJson(tenant).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)});
    }
    case Opcode::kPing: break;
  }
  return Status::InvalidArgument("unknown opcode");
}

Result<std::vector<uint8_t>> RequestHandler::DoLookup(const std::string& tenant, const Frame& f) {
  KVSTASH_ASSIGN_OR_RETURN(auto req, protocol::LookupRequest::Decode(f.header.flags, f.body));
  std::vector<StoredKey> keys;
  keys.reserve(req.keys.size());
  uint64_t tokens = 0;
  for (const auto& k : req.keys) {
    keys.push_back(ScopeKey(tenant, k.key));
    tokens += k.tokens;
  }
  KVSTASH_ASSIGN_OR_RETURN(LookupResult found, store_->Lookup(keys, req.require_state));
  // matched_tokens counts the stored chunks' own token counts (a partial last chunk
  // counts what it holds, whatever the client said); tokens requested are the client's.
  protocol::LookupReply reply;
  reply.matched_chunks = std::min<uint32_t>(found.matched_chunks, keys.size());
  reply.matched_tokens = found.matched_tokens;
  // The hit-rate metrics count at most the tokens the request asked for its matched
  // chunks: a client that claims fewer tokens than a chunk holds cannot push the token
  // hit rate above 1.
  uint64_t asked_matched = 0;
  for (uint32_t i = 0; i < reply.matched_chunks; ++i) asked_matched += req.keys[i].tokens;
  Record(tenant, [&](Metrics& m) {
    m.RecordLookup(keys.size(), tokens, reply.matched_chunks, std::min(reply.matched_tokens, asked_matched));
  });
  return Body(reply);
}

Result<std::vector<uint8_t>> RequestHandler::DoPut(const std::string& tenant, const Frame& f) {
  KVSTASH_ASSIGN_OR_RETURN(auto req, protocol::PutRequest::Decode(f.header.flags, f.body));
  auto parsed = ParsePayload(req.payload);
  if (!parsed.ok()) {
    Record(tenant, [](Metrics& m) { m.RecordPayloadRejected(); });
    return parsed.status().WithContext("PUT payload");
  }
  const PayloadView& p = *parsed;
  // A payload carries the key it is stored under (docs/format/payload.md, version 2), so
  // a reader can tell a payload served under another key from its own.
  if (Status s = CheckPutKey(p.header, req.key); !s.ok()) {
    Record(tenant, [](Metrics& m) { m.RecordPayloadRejected(); });
    return s;
  }
  if (!IsKnownCodec(p.header.codec)) {
    Record(tenant, [](Metrics& m) { m.RecordPayloadRejected(); });
    return Status::InvalidArgument("PUT payload: unknown codec id " +
                                   std::to_string(static_cast<int>(p.header.codec)) +
                                   " (docs/format/payload.md lists 0..5)");
  }
  if (p.header.codec == CodecId::kRaw) {
    if (Status s = CheckRawBody(p); !s.ok()) {
      Record(tenant, [](Metrics& m) { m.RecordPayloadRejected(); });
      return s.WithContext("PUT payload");
    }
  }
  // Server-side encoding (codec placement): the payload to store and its codec.
  std::vector<uint8_t> encoded;  // when the server encodes
  std::span<const uint8_t> stored = req.payload;
  CodecId stored_codec = p.header.codec;
  if (req.raw_kv) {
    if (p.header.codec != CodecId::kRaw) {
      return Status::InvalidArgument("PUT with the raw-KV flag carries a codec " +
                                     std::to_string(static_cast<int>(p.header.codec)) +
                                     " payload (raw KV must be codec 0)");
    }
    if (req.target_codec != CodecId::kRaw) {
      if (codecs_ == nullptr) {
        return Status::NotSupported("server-side encoding is not configured on this server");
      }
      KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> unbound,
                               codecs_->Encode(tenant, p, req.target_codec, req.prefix_tokens));
      KVSTASH_ASSIGN_OR_RETURN(encoded, BindPayloadToKey(unbound, req.key));
      stored = encoded;
      stored_codec = req.target_codec;
    }
  }
  if (!req.state_record.empty()) {
    if (auto st = DecodeStateRecord(req.state_record); !st.ok()) {
      Record(tenant, [](Metrics& m) { m.RecordPayloadRejected(); });
      return st.status().WithContext("PUT state record");
    }
  }
  // Request memory of what is stored (and codec-level check of dckv/kvtc row counts).
  Result<PayloadMemory> measured = MeasurePayload(stored);
  if (!measured.ok()) {
    Record(tenant, [](Metrics& m) { m.RecordPayloadRejected(); });
    return measured.status().WithContext("PUT payload");
  }
  const RequestMemory memory{measured->payload_bytes, measured->raw_position_bytes,
                             req.state_record.size()};
  PutChunk w;
  w.key = ScopeKey(tenant, req.key);
  if (req.parent) w.parent = ScopeKey(tenant, *req.parent);
  w.tokens = p.header.tokens;
  w.partial = (p.header.flags & kPayloadFlagPartialChunk) != 0;
  w.codec = static_cast<uint16_t>(stored_codec);
  w.payload = stored;
  w.state = req.state_record;
  const StoredKey parent = req.parent.value_or(StoredKey{});
  const StoredKey scoped_parent = w.parent.value_or(StoredKey{});
  if (Status s = store_->Put(w); !s.ok()) {
    if (s.IsNotFound() && req.parent) {
      // The store's message names the scoped parent; say it in the client's terms.
      return Status::NotFound("PUT " + ToHex(req.key) + ": parent " + ToHex(*req.parent) +
                              " is not stored; put the chain from its first missing chunk");
    }
    if (s.IsMismatch()) {
      // The store names the stored (scoped) parent, which the client cannot map back.
      return Status::Mismatch(
          "PUT " + ToHex(req.key) + ": the key is stored with another parent than this PUT names (" +
          (req.parent ? ToHex(*req.parent) : std::string("none")) +
          "); a chunk key has one parent: DELETE the key to re-link it");
    }
    return Unscope(std::move(s), {{w.key, req.key}, {scoped_parent, parent}});
  }
  if (req.pin) {
    KVSTASH_RETURN_IF_ERROR(Unscope(store_->SetPinned(w.key, true).status(), {{w.key, req.key}}));
  }
  Record(tenant, [&](Metrics& m) {
    m.RecordPut(w.codec, CanonicalBytes(p.header), stored.size());
    m.RecordMemory(Opcode::kPut, memory);
  });
  protocol::PutReply reply{stored.size(), std::nullopt};
  if (req.memory) {
    reply.memory = protocol::ReplyMemory{measured->raw_positions, measured->raw_position_bytes,
                                         memory.state_bytes};
  }
  return Body(reply);
}

Result<Reply> RequestHandler::DoGet(const std::string& tenant, const Frame& f) {
  KVSTASH_ASSIGN_OR_RETURN(auto req, protocol::GetRequest::Decode(f.header.flags, f.body));
  const StoredKey scoped = ScopeKey(tenant, req.key);
  Result<std::optional<ChunkRead>> got = store_->Get(scoped);
  if (!got.ok()) {
    if (got.status().IsCorruption()) Record(tenant, [](Metrics& m) { m.RecordGetCorrupt(); });
    return Unscope(got.status(), {{scoped, req.key}});
  }
  std::optional<ChunkRead> hit = std::move(got).value();
  if (!hit) {
    Record(tenant, [](Metrics& m) { m.RecordGetMiss(); });
    return Status::NotFound("chunk not stored");
  }
  const std::span<const uint8_t> stored(reinterpret_cast<const uint8_t*>(hit->payload->data()),
                                        hit->payload->size());
  KVSTASH_ASSIGN_OR_RETURN(PayloadHeader ph, ParsePayloadHeader(stored));
  // Serve (or decode) only the payload of the key asked for: one stored under another
  // key is a storage fault, reported as Corruption instead of sent.
  if (Status s = CheckPayloadKey(ph, req.key); !s.ok()) {
    if (s.IsCorruption()) Record(tenant, [](Metrics& m) { m.RecordGetCorrupt(); });
    return s.WithContext("stored payload of " + ToHex(req.key));
  }
  if (req.decoded && ph.codec != CodecId::kRaw) {
    if (codecs_ == nullptr) {
      return Status::NotSupported("server-side decoding is not configured on this server");
    }
    KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> decoded, codecs_->Decode(tenant, stored));
    hit->payload = std::make_shared<const std::string>(decoded.begin(), decoded.end());
  }
  const std::span<const uint8_t> payload(reinterpret_cast<const uint8_t*>(hit->payload->data()),
                                         hit->payload->size());
  Result<PayloadMemory> measured = MeasurePayload(payload);
  if (!measured.ok()) return measured.status().WithContext("stored payload");
  // Body (messages.h GetReply): payload || state || [u32 raw_positions || u64
  // raw_position_bytes] || u32 state_bytes || u32 payload_bytes.
  // The payload is sent from the store's shared buffer, never copied.
  Reply reply;
  reply.shared = hit->payload;
  const std::string* state = req.with_state && hit->state ? hit->state.get() : nullptr;
  ByteWriter w(&reply.tail);
  if (state) w.Bytes(*state);
  if (req.memory) {
    w.U32(measured->raw_positions);
    w.U64(measured->raw_position_bytes);
  }
  w.U32(state ? static_cast<uint32_t>(state->size()) : 0);
  w.U32(static_cast<uint32_t>(payload.size()));
  protocol::FrameHeader h;
  h.opcode = static_cast<uint8_t>(f.header.opcode | protocol::kReplyBit);
  h.request_id = f.header.request_id;
  h.flags = req.memory ? protocol::kReplyFlagMemory : 0;
  h.body_bytes = static_cast<uint32_t>(payload.size() + reply.tail.size());
  h.body_crc32c = Crc32c(reply.tail, Crc32c(payload));
  reply.head.resize(protocol::kFrameHeaderBytes);
  protocol::EncodeFrameHeader(h, reply.head.data());
  const RequestMemory memory{payload.size(), measured->raw_position_bytes,
                             state ? state->size() : 0};
  Record(tenant, [&](Metrics& m) {
    m.RecordGetHit(payload.size());
    m.RecordMemory(Opcode::kGet, memory);
  });
  return reply;
}

Result<std::vector<uint8_t>> RequestHandler::DoDelete(const std::string& tenant, const Frame& f) {
  KVSTASH_ASSIGN_OR_RETURN(auto req, protocol::DeleteRequest::Decode(f.header.flags, f.body));
  const StoredKey scoped = ScopeKey(tenant, req.key);
  Result<uint64_t> removed = store_->Delete(scoped);
  if (!removed.ok()) return Unscope(removed.status(), {{scoped, req.key}});
  return Body(protocol::DeleteReply{*removed > 0});
}

Result<std::vector<uint8_t>> RequestHandler::DoPin(const std::string& tenant, const Frame& f) {
  KVSTASH_ASSIGN_OR_RETURN(auto req, protocol::PinRequest::Decode(f.header.flags, f.body));
  const StoredKey scoped = ScopeKey(tenant, req.key);
  Result<uint64_t> pinned = store_->SetPinned(scoped, req.pin);
  if (!pinned.ok()) return Unscope(pinned.status(), {{scoped, req.key}});
  if (*pinned == 0) return Status::NotFound("chunk not stored");
  return Body(protocol::PinReply{});
}

bool RequestHandler::RunsInline(const protocol::FrameHeader& h) const {
  const auto op = static_cast<Opcode>(h.opcode);
  return op == Opcode::kPing || (op == Opcode::kLookup && store_->LookupIsInMemory());
}

nlohmann::json RequestHandler::TenantStatsJson(const std::string& tenant) const {
  auto it = tenant_metrics_.find(tenant);
  if (it == tenant_metrics_.end()) return Metrics().RenderTenantJson(tenant, limits_.server_id);
  return it->second->RenderTenantJson(tenant, limits_.server_id);
}

std::vector<std::pair<std::string, TrafficTotals>> RequestHandler::TenantTotals() const {
  std::vector<std::pair<std::string, TrafficTotals>> out;
  out.reserve(tenant_metrics_.size());
  for (const auto& [name, m] : tenant_metrics_) out.emplace_back(name, m->Totals());
  return out;
}

nlohmann::json RequestHandler::StatsJson() const {
  nlohmann::json j = metrics_->RenderJson(store_->Snapshot(), limits_.server_id);
  nlohmann::json tenants = nlohmann::json::object();
  for (const auto& [name, t] : TenantTotals()) {
    tenants[name] = {{"requests", t.requests},
                     {"errors", t.errors},
                     {"tokens_requested", t.tokens_requested},
                     {"tokens_hit", t.tokens_hit},
                     {"hit_rate", t.hit_rate()},
                     {"put_raw_bytes", t.put_raw_bytes},
                     {"put_stored_bytes", t.put_stored_bytes},
                     {"get_bytes", t.get_bytes}};
  }
  j["tenants"] = std::move(tenants);
  return j;
}

std::string RequestHandler::HealthDetail() const {
  std::string out;
  for (const auto& t : store_->Snapshot().tiers) {
    if (t.enabled && !t.up) {
      out += t.name + " down: unreachable, serving without it and reconnecting (degraded)\n";
    }
    if (!t.enabled) continue;
    const std::string space = "once " + Mib(t.free_bytes_needed) + " are free (" +
                              Mib(t.disk_free_bytes) + " free now)";
    if (t.read_only_filesystem) {
      out += t.name + " read-only (its file system is mounted read-only): PUTs fail, reads are "
             "served (degraded); check the disk, remount it read-write and restart\n";
    } else if (t.read_only) {
      out += t.name + " read-only (its read-write open at start-up failed for lack of space): "
             "PUTs fail, reads are served (degraded); restart " + space + "\n";
    } else if (t.needs_restart) {
      out += t.name + " needs a restart (its write-ahead log failed while the disk was full): "
             "PUTs fail, reads are served (degraded); restart " + space + "\n";
    } else if (t.writes_failing && t.disk_free_bytes < t.free_bytes_needed) {
      out += t.name + " writes failing (disk full): PUTs fail, reads are served (degraded); "
             "they resume by themselves " + space + "\n";
    } else if (t.writes_failing) {
      out += t.name + " writes failing (disk full or I/O error): PUTs fail, reads are served "
             "(degraded); retried at the next PUT, see the server log\n";
    }
  }
  return out;
}

std::string RequestHandler::PrometheusText() const {
  return metrics_->RenderPrometheus(store_->Snapshot()) + RenderTenantPrometheus(TenantTotals());
}

}  // namespace kvstash::server
