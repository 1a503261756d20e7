#include "kvstash/client.h"

#include <algorithm>

#include "client/client_impl.h"
#include "common/checksum.h"
#include "kvstash/payload_format.h"
#include "protocol/messages.h"

namespace kvstash {

using protocol::Frame;
using protocol::Opcode;

namespace {

uint64_t RendezvousScore(const std::string& server, const StoredKey& key) {
  std::string buf = server;
  buf.append(reinterpret_cast<const char*>(key.data()), key.size());
  return Xxh3_64(buf);
}

}  // namespace

size_t RendezvousPick(std::span<const std::string> servers, const StoredKey& key) {
  size_t best = 0;
  uint64_t best_score = 0;
  for (size_t i = 0; i < servers.size(); ++i) {
    const uint64_t score = RendezvousScore(servers[i], key);
    if (i == 0 || score > best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

std::vector<size_t> RendezvousOrder(std::span<const std::string> servers, const StoredKey& key) {
  std::vector<std::pair<uint64_t, size_t>> scored;
  for (size_t i = 0; i < servers.size(); ++i) {
    scored.emplace_back(RendezvousScore(servers[i], key), i);
  }
  // Highest score first; a tie goes to the lower index, as in RendezvousPick.
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<size_t> out;
  for (const auto& [score, i] : scored) out.push_back(i);
  return out;
}

Result<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return Status::InvalidArgument("server address \"" + address + "\" is not host:port");
  }
  std::string host = address.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return Status::InvalidArgument("server address \"" + address + "\": bad [IPv6] literal");
    }
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {  // "::1:7470": which colon ends the host?
    return Status::InvalidArgument("server address \"" + address +
                                   "\": an IPv6 address needs brackets, [ADDRESS]:PORT");
  }
  const std::string port = address.substr(colon + 1);
  uint32_t value = 0;
  for (char ch : port) {
    if (ch < '0' || ch > '9' || port.size() > 5) {
      return Status::InvalidArgument("server address \"" + address + "\": port \"" + port +
                                     "\" is not a number in 1..65535");
    }
    value = value * 10 + static_cast<uint32_t>(ch - '0');
  }
  if (value == 0 || value > 65535) {
    return Status::InvalidArgument("server address \"" + address + "\": port " + port +
                                   " is outside 1..65535");
  }
  return std::make_pair(host, static_cast<uint16_t>(value));
}

// ---------------------------------------------------------------- typed calls
namespace {

// True when `payload` has a well-formed header that is bound to no key (version 1).
bool IsUnbound(std::span<const uint8_t> payload) {
  auto h = ParsePayloadHeader(payload);
  return h.ok() && !h->chunk_key;
}

template <typename T>
Result<T> DecodeReply(Result<Frame> r) {
  if (!r.ok()) return r.status();
  return T::Decode(r->header.flags, r->body);
}

template <typename Req>
std::vector<uint8_t> EncodeBody(const Req& req) {
  std::vector<uint8_t> b;
  req.Encode(&b);
  return b;
}

// Turns a callback API into a future.
template <typename T>
std::pair<std::future<T>, std::function<void(T)>> Promise() {
  auto p = std::make_shared<std::promise<T>>();
  return {p->get_future(), [p](T v) { p->set_value(std::move(v)); }};
}

}  // namespace

Result<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  KVSTASH_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() { impl_->Stop(); }

size_t Client::ServerFor(const StoredKey& route) const { return impl_->ServerFor(route); }

void Client::LookupAsync(std::vector<ChunkRef> chain, bool require_state,
                         std::function<void(Result<LookupResult>)> done, const CallOptions& call) {
  if (chain.empty()) {
    done(Status::InvalidArgument("Lookup of an empty chain"));
    return;
  }
  if (chain.size() > protocol::kMaxLookupKeys) {
    done(Status::InvalidArgument("Lookup of more than 65536 chunks"));
    return;
  }
  protocol::LookupRequest req;
  req.require_state = require_state;
  for (const ChunkRef& c : chain) req.keys.push_back({c.key, c.tokens});
  impl_->SubmitRouted(chain[0].key, Opcode::kLookup, req.Flags(), EncodeBody(req), call,
                      [done = std::move(done)](Result<Frame> r) {
                        auto m = DecodeReply<protocol::LookupReply>(std::move(r));
                        if (!m.ok()) return done(m.status());
                        done(LookupResult{m->matched_chunks, m->matched_tokens});
                      });
}

std::future<Result<LookupResult>> Client::LookupAsync(std::vector<ChunkRef> chain,
                                                      bool require_state, const CallOptions& call) {
  auto [f, cb] = Promise<Result<LookupResult>>();
  LookupAsync(std::move(chain), require_state, std::move(cb), call);
  return std::move(f);
}

Result<LookupResult> Client::Lookup(std::span<const ChunkRef> chain, bool require_state,
                                    const CallOptions& call) {
  return LookupAsync(std::vector<ChunkRef>(chain.begin(), chain.end()), require_state, call).get();
}

void Client::PutWithResultAsync(PutChunk chunk, std::function<void(Result<PutResult>)> done,
                                const CallOptions& call) {
  if (chunk.payload.empty()) {
    done(Status::InvalidArgument("Put without a payload"));
    return;
  }
  // A payload carries the key it is stored under (format version 2): one a codec wrote
  // unbound is bound to chunk.key here. Anything else goes as it is, and the server
  // refuses a payload bound to another key or malformed.
  if (IsUnbound(chunk.payload)) {
    auto bound = BindPayloadToKey(chunk.payload, chunk.key);
    if (!bound.ok()) return done(bound.status().WithContext("Put"));
    chunk.payload = std::move(bound).value();
  }
  const StoredKey route = chunk.route;
  protocol::PutRequest req;
  req.key = chunk.key;
  req.parent = chunk.parent;
  req.raw_kv = chunk.raw_kv;
  req.pin = chunk.pin;
  req.target_codec = chunk.target_codec;
  req.prefix_tokens = chunk.raw_kv ? chunk.prefix_tokens : 0;
  req.payload = std::move(chunk.payload);
  req.state_record = std::move(chunk.state_record);
  req.memory = impl_->options().request_memory;
  impl_->SubmitRouted(route, Opcode::kPut, req.Flags(), EncodeBody(req), call,
                      [done = std::move(done)](Result<Frame> r) {
                        auto m = DecodeReply<protocol::PutReply>(std::move(r));
                        if (!m.ok()) return done(m.status());
                        PutResult out{m->stored_bytes, std::nullopt};
                        if (m->memory) {
                          out.memory = RequestMemory{m->stored_bytes, m->memory->raw_positions,
                                                     m->memory->raw_position_bytes,
                                                     m->memory->state_bytes};
                        }
                        done(std::move(out));
                      });
}

std::future<Result<PutResult>> Client::PutWithResultAsync(PutChunk chunk, const CallOptions& call) {
  auto [f, cb] = Promise<Result<PutResult>>();
  PutWithResultAsync(std::move(chunk), std::move(cb), call);
  return std::move(f);
}

Result<PutResult> Client::PutWithResult(const PutChunk& chunk, const CallOptions& call) {
  return PutWithResultAsync(chunk, call).get();
}

void Client::PutAsync(PutChunk chunk, std::function<void(Status)> done, const CallOptions& call) {
  PutWithResultAsync(
      std::move(chunk), [done = std::move(done)](Result<PutResult> r) { done(r.status()); }, call);
}

std::future<Status> Client::PutAsync(PutChunk chunk, const CallOptions& call) {
  auto [f, cb] = Promise<Status>();
  PutAsync(std::move(chunk), std::move(cb), call);
  return std::move(f);
}

Status Client::Put(const PutChunk& chunk, const CallOptions& call) {
  return PutAsync(chunk, call).get();
}

void Client::GetAsync(const StoredKey& route, const StoredKey& key, GetOptions get,
                      std::function<void(Result<GetResult>)> done, const CallOptions& call) {
  protocol::GetRequest req{key, get.decoded, get.with_state, impl_->options().request_memory};
  impl_->SubmitRouted(route, Opcode::kGet, req.Flags(), EncodeBody(req), call,
                      [done = std::move(done), key](Result<Frame> r) {
                        if (!r.ok()) return done(r.status());
                        auto m = protocol::GetReply::DecodeOwned(r->header.flags,
                                                                 std::move(r->body));
                        if (!m.ok()) return done(m.status());
                        // Only an intact payload stored under `key` is returned: one
                        // damaged on the way (body checksum) or another chunk's (a
                        // server, proxy or storage fault) is Corruption.
                        auto parsed = ParsePayload(m->payload);
                        Status s = parsed.ok() ? CheckPayloadKey(parsed->header, key) : parsed.status();
                        if (!s.ok()) return done(s.WithContext("GET " + ToHex(key)));
                        GetResult out{std::move(m->payload), std::move(m->state_record),
                                      std::nullopt};
                        if (m->memory) {
                          out.memory = RequestMemory{out.payload.size(), m->memory->raw_positions,
                                                     m->memory->raw_position_bytes,
                                                     m->memory->state_bytes};
                        }
                        done(std::move(out));
                      });
}

std::future<Result<GetResult>> Client::GetAsync(const StoredKey& route, const StoredKey& key,
                                                GetOptions get, const CallOptions& call) {
  auto [f, cb] = Promise<Result<GetResult>>();
  GetAsync(route, key, get, std::move(cb), call);
  return std::move(f);
}

Result<GetResult> Client::Get(const StoredKey& route, const StoredKey& key, GetOptions get,
                              const CallOptions& call) {
  return GetAsync(route, key, get, call).get();
}

void Client::DeleteAsync(const StoredKey& route, const StoredKey& key,
                         std::function<void(Result<bool>)> done, const CallOptions& call) {
  protocol::DeleteRequest req{key};
  impl_->SubmitRouted(route, Opcode::kDelete, req.Flags(), EncodeBody(req), call,
                      [done = std::move(done)](Result<Frame> r) {
                        auto m = DecodeReply<protocol::DeleteReply>(std::move(r));
                        if (!m.ok()) return done(m.status());
                        done(m->existed);
                      });
}

std::future<Result<bool>> Client::DeleteAsync(const StoredKey& route, const StoredKey& key,
                                              const CallOptions& call) {
  auto [f, cb] = Promise<Result<bool>>();
  DeleteAsync(route, key, std::move(cb), call);
  return std::move(f);
}

Result<bool> Client::Delete(const StoredKey& route, const StoredKey& key, const CallOptions& call) {
  return DeleteAsync(route, key, call).get();
}

void Client::PinAsync(const StoredKey& route, const StoredKey& key, bool pin,
                      std::function<void(Status)> done, const CallOptions& call) {
  protocol::PinRequest req{key, pin};
  impl_->SubmitRouted(route, Opcode::kPin, req.Flags(), EncodeBody(req), call,
                      [done = std::move(done)](Result<Frame> r) {
                        done(DecodeReply<protocol::PinReply>(std::move(r)).status());
                      });
}

std::future<Status> Client::PinAsync(const StoredKey& route, const StoredKey& key, bool pin,
                                     const CallOptions& call) {
  auto [f, cb] = Promise<Status>();
  PinAsync(route, key, pin, std::move(cb), call);
  return std::move(f);
}

Status Client::Pin(const StoredKey& route, const StoredKey& key, bool pin, const CallOptions& call) {
  return PinAsync(route, key, pin, call).get();
}

void Client::StatsAsync(size_t server_index, std::function<void(Result<std::string>)> done,
                        const CallOptions& call) {
  if (server_index >= impl_->options().servers.size()) {
    return done(Status::InvalidArgument("no server with index " + std::to_string(server_index)));
  }
  impl_->Submit(server_index, Opcode::kStats, 0, {}, call, [done = std::move(done)](Result<Frame> r) {
    auto m = DecodeReply<protocol::StatsReply>(std::move(r));
    if (!m.ok()) return done(m.status());
    done(std::move(m->json));
  });
}

std::future<Result<std::string>> Client::StatsAsync(size_t server_index, const CallOptions& call) {
  auto [f, cb] = Promise<Result<std::string>>();
  StatsAsync(server_index, std::move(cb), call);
  return std::move(f);
}

Result<std::string> Client::Stats(size_t server_index, const CallOptions& call) {
  return StatsAsync(server_index, call).get();
}

Status Client::Ping(size_t server_index, const CallOptions& call) {
  if (server_index >= impl_->options().servers.size()) {
    return Status::InvalidArgument("no server with index " + std::to_string(server_index));
  }
  auto [f, cb] = Promise<Status>();
  const std::vector<uint8_t> data = {'k', 'v', 's'};
  impl_->Submit(server_index, Opcode::kPing, 0, data, call,
                [cb = std::move(cb), data](Result<Frame> r) {
                  auto m = DecodeReply<protocol::PingMessage>(std::move(r));
                  if (!m.ok()) return cb(m.status());
                  cb(m->data == data ? Status::Ok() : Status::Corruption("PING echo differs"));
                });
  return f.get();
}

Result<uint32_t> Client::MaxFrameBytes(size_t server_index, const CallOptions& call) {
  // A PING goes through a connection that has done HELLO, so one is ready after it.
  if (Status s = Ping(server_index, call); !s.ok()) {
    return s.WithContext("reaching the server for its max_frame_bytes");
  }
  const uint32_t max = impl_->ReadyMaxFrame(server_index);
  if (max == 0) return Status::Unavailable("no connection to the server is ready");
  return max;
}

}  // namespace kvstash
