// kvstash::Client: the C++ client of a kvstash server fleet (docs/protocol.md).
//
// A Client talks to one or more servers. A prefix chain lives on one server: the
// server of a chain is chosen by rendezvous (highest-random-weight) hashing of the
// chain's FIRST chunk key over the configured server addresses (Thaler & Ravishankar,
// "Using name-based mappings to increase hit rates", 1998): score(s) =
// XXH3-64(address(s) || key), highest score wins. Adding or removing a server moves
// only the chains whose winner changed. Every call therefore takes the chain's first
// chunk key (`route`) besides the key it acts on.
//
// Each server has a pool of `connections_per_server` TCP (or TLS, ClientTlsOptions)
// connections (opened lazily, HELLO with the tenant credential first); calls are
// pipelined on them, replies are matched by request id. A request larger than the
// max_frame_bytes the server announced in its HELLO reply is refused locally with
// InvalidArgument (never sent, never retried). Every call has a deadline (CallOptions::deadline, default
// ClientOptions::default_deadline) covering all its attempts. A call whose reply is a
// retryable status (Unavailable, ResourceExhausted, DeadlineExceeded) or whose
// connection fails is retried with exponential backoff and jitter, up to
// `max_attempts`, while its deadline allows; other statuses are returned at once.
//
// Failover: when connecting to a server fails (refused, unreachable, timed out), or an
// open connection's peer stops acknowledging (ClientOptions::unacked_timeout), that
// server is marked down for ClientOptions::down_server_skip. A call routed by a chain
// key (Lookup, Put, Get, Delete, Pin) goes, at each attempt, to the first server of the
// chain's rendezvous order (RendezvousOrder) that is not marked down, so a dead
// node's chains fail over to their second-choice server without waiting for the
// deadline: their Lookups and Gets there are misses (matched 0, NotFound) rather
// than errors, and their Puts land there. Moving to another server skips the
// backoff. When every server is marked down the owner is tried. A node that comes
// back is used again once its mark expires; entries put elsewhere meanwhile are not
// moved back (a chain's key always names the same bytes, so no caller ever reads
// wrong KV, only misses). Calls addressed by server index (Stats, Ping) never fail over.
//
// All socket work runs on one I/O thread owned by the client. Sync calls block the
// caller; async calls return a std::future or invoke a callback on that I/O thread (callbacks must not block and must not call sync
// methods of the same client).
//
// Thread-safety: all methods may be called concurrently from any thread. Destroying
// the Client fails outstanding calls with Unavailable and joins its threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvstash/payload_format.h"
#include "kvstash/prefix_key.h"
#include "kvstash/result.h"

namespace kvstash {

// TLS to servers whose protocol port speaks TLS (server config `tls`).
struct ClientTlsOptions {
  bool enabled = false;  // Default: plain TCP.
  // PEM file of the CA certificate(s) that signed the servers' certificates (a
  // self-signed server certificate is its own CA). Empty: the system's default CA
  // paths (OpenSSL's, e.g. /etc/ssl/certs).
  std::string ca_file;
  // Verify the server's certificate chain and that it names the server (RFC 6125 host
  // name, or IP address SAN for an IP literal). false accepts any certificate: the
  // connection is encrypted but not authenticated (tests only). Default: true.
  bool verify_peer = true;
  // Name sent as SNI and checked against the certificate. Empty: the host part of each
  // server address (an IP literal is checked as an IP address and sends no SNI).
  std::string server_name;
};

struct ClientOptions {
  // Server addresses "host:port" (IPv4/IPv6 literal or name). At least one.
  std::vector<std::string> servers;
  std::string tenant;      // tenant name in the servers' config
  std::string credential;  // that tenant's secret
  std::string client_name = "kvstash-client";  // shown in server logs
  // Pooled connections per server. Default: 2.
  uint32_t connections_per_server = 2;
  // Deadline of a call when CallOptions has none. Default: 5 s.
  std::chrono::milliseconds default_deadline{5000};
  // Attempts per call (1 = no retry). Default: 3.
  uint32_t max_attempts = 3;
  // Backoff before retry n (n >= 1): min(max_backoff, initial_backoff * 2^(n-1)) times a
  // random factor in [0.5, 1]. Defaults: 10 ms, 500 ms.
  std::chrono::milliseconds initial_backoff{10};
  std::chrono::milliseconds max_backoff{500};
  // Largest reply body accepted (bytes). Default: 1 GiB.
  uint32_t max_reply_bytes = 1u << 30;
  // Deadline of connecting + TLS handshake + HELLO to a server. Default: 2 s.
  std::chrono::milliseconds connect_timeout{2000};
  // How long a server whose connect failed (or whose host stopped acknowledging, see
  // unacked_timeout) is skipped by routed calls (failover, see the file comment).
  // 0: no failover (routed calls keep trying the chain's owner). Default: 1 s.
  std::chrono::milliseconds down_server_skip{1000};
  // A connection whose sent bytes the server's host leaves unacknowledged this long is
  // aborted (Linux TCP_USER_TIMEOUT) and the server marked down: a host that vanished
  // without closing its connections (power, network) fails over instead of holding
  // every call on it until its deadline. A connection with calls pending that has read
  // nothing for this long sends a PING (liveness probe) so that a host that vanished
  // after acknowledging every request is noticed too: about 2 x unacked_timeout after
  // it was last heard from (1.43 s measured at 0.5 s). Keep it above the slowest link's
  // queueing delay and below half the deadlines; 0: the kernel's default (about 15
  // minutes) and no probe. Default: 3 s.
  std::chrono::milliseconds unacked_timeout{3000};
  ClientTlsOptions tls;
  // Ask PUT and GET replies for the request memory (PutResult::memory,
  // GetResult::memory; docs/protocol.md §5.7). A server older than that addition
  // answers these requests InvalidArgument (unknown flag bit): set false for it.
  // Default: true.
  bool request_memory = true;
};

struct CallOptions {
  // Overrides ClientOptions::default_deadline for this call.
  std::optional<std::chrono::milliseconds> deadline;
};

// One chunk of a prefix chain for Lookup: its stored key and its token count.
struct ChunkRef {
  StoredKey key{};
  uint32_t tokens = 0;
};

struct LookupResult {
  uint32_t matched_chunks = 0;  // chain[0..matched_chunks) are stored
  uint64_t matched_tokens = 0;
};

// What one PUT stored or one GET returned weighs, as the server measured it from the
// payload and codec headers (docs/protocol.md §5.7). Bytes.
struct RequestMemory {
  uint64_t payload_bytes = 0;       // whole payload (152-byte header + codec body)
  uint32_t raw_positions = 0;       // token positions kept uncompressed in the payload
  uint64_t raw_position_bytes = 0;  // their bytes (part of payload_bytes)
  uint64_t state_bytes = 0;         // recurrent-state record (0: none)
  // payload + state = coded bytes + uncompressed positions + state.
  uint64_t total_bytes() const { return payload_bytes + state_bytes; }
  uint64_t coded_bytes() const { return payload_bytes - raw_position_bytes; }
  bool operator==(const RequestMemory&) const = default;
};

struct PutChunk {
  StoredKey route{};                // first chunk key of the chain (routing)
  StoredKey key{};                  // this chunk's stored key
  std::optional<StoredKey> parent;  // previous chunk of the chain (none for chunk 0)
  // A whole chunk payload (kvstash/payload_format.h). With raw_kv it must be codec kRaw
  // and the server encodes it with target_codec (docs/protocol.md §5.3).
  std::vector<uint8_t> payload;
  std::vector<uint8_t> state_record;  // optional EncodeStateRecord() record
  bool raw_kv = false;
  CodecId target_codec = CodecId::kRaw;
  // With raw_kv: tokens of the stored prefix this chunk belongs to (the server's dckv
  // encoder keeps the prefix's last positions raw); 0 = this chunk ends the prefix.
  uint32_t prefix_tokens = 0;
  bool pin = false;
};

struct GetOptions {
  // Ask for the decoded chunk (a codec-kRaw payload): raw and dckv (with the tenant's
  // configured artifact) decode on the server; spec is NotSupported (decode it where
  // the model runs).
  bool decoded = false;
  bool with_state = false;  // also return the recurrent-state record, if any
};

struct GetResult {
  std::vector<uint8_t> payload;       // whole chunk payload
  std::vector<uint8_t> state_record;  // empty when absent or not asked for
  // Of the payload and state record returned (set when ClientOptions::request_memory).
  std::optional<RequestMemory> memory;
};

struct PutResult {
  uint64_t stored_bytes = 0;  // payload bytes as stored (after server-side encoding)
  // Of the payload and state record stored (set when ClientOptions::request_memory).
  std::optional<RequestMemory> memory;
};

class Client {
 public:
  // Validates the options and starts the I/O threads; connections open on first use.
  // Errors: InvalidArgument for no servers, a bad address (SplitHostPort), an empty
  // tenant, zero counts or a TLS CA file that does not load.
  static Result<std::unique_ptr<Client>> Create(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Index into options.servers of the server owning the chain whose first chunk key
  // is `route` (rendezvous hashing, see the file comment). The owner whether or not
  // it is marked down (calls fail over from a down owner; see the file comment).
  size_t ServerFor(const StoredKey& route) const;

  // Longest stored run from chain[0] (chain non-empty; routed by chain[0].key).
  Result<LookupResult> Lookup(std::span<const ChunkRef> chain, bool require_state = false,
                              const CallOptions& call = {});
  // Stores one chunk. A payload not yet bound to a key (format version 1, as a codec
  // writes it) is bound to chunk.key first (docs/format/payload.md); the server refuses
  // one bound to another key. Errors: the server's (InvalidArgument/Corruption for a
  // payload that fails validation or is bound to another key, NotFound for a parent not
  // stored, NotSupported for a codec the server cannot encode), DeadlineExceeded,
  // Unavailable.
  Status Put(const PutChunk& chunk, const CallOptions& call = {});
  // Put, returning what the server stored (stored bytes, request memory).
  Result<PutResult> PutWithResult(const PutChunk& chunk, const CallOptions& call = {});
  // The payload stored under `key`, verified: its header, body checksum (XXH3-64, about
  // 0.1 ms per MB) and key binding (format version 2). Errors: NotFound on a miss;
  // Corruption when the stored chunk failed its checksum on the server, when the reply's
  // payload is damaged, or when it is bound to another key (a server, proxy or storage
  // fault: never returned); Mismatch for an unbound (version 1) payload;
  // DeadlineExceeded, Unavailable.
  Result<GetResult> Get(const StoredKey& route, const StoredKey& key, GetOptions get = {},
                        const CallOptions& call = {});
  // Removes the chunk and its descendants; true when it existed.
  Result<bool> Delete(const StoredKey& route, const StoredKey& key, const CallOptions& call = {});
  // Pins (pin=true) or unpins. NotFound when the chunk is not stored.
  Status Pin(const StoredKey& route, const StoredKey& key, bool pin = true,
             const CallOptions& call = {});
  // The /v1/stats JSON document of server `server_index`.
  Result<std::string> Stats(size_t server_index, const CallOptions& call = {});
  // Round trip to server `server_index` (no HELLO needed on the server side).
  Status Ping(size_t server_index, const CallOptions& call = {});
  // The max_frame_bytes server `server_index` announced in its HELLO reply (connecting
  // first if needed): the largest request body it accepts. Lets a caller check a large
  // payload before building it. Errors: as Ping, InvalidArgument for a bad index.
  Result<uint32_t> MaxFrameBytes(size_t server_index, const CallOptions& call = {});

  // Async forms: the future or the callback gets what the sync form returns.
  std::future<Result<LookupResult>> LookupAsync(std::vector<ChunkRef> chain,
                                                bool require_state = false,
                                                const CallOptions& call = {});
  void LookupAsync(std::vector<ChunkRef> chain, bool require_state,
                   std::function<void(Result<LookupResult>)> done, const CallOptions& call = {});
  std::future<Status> PutAsync(PutChunk chunk, const CallOptions& call = {});
  void PutAsync(PutChunk chunk, std::function<void(Status)> done, const CallOptions& call = {});
  std::future<Result<PutResult>> PutWithResultAsync(PutChunk chunk, const CallOptions& call = {});
  void PutWithResultAsync(PutChunk chunk, std::function<void(Result<PutResult>)> done,
                          const CallOptions& call = {});
  std::future<Result<GetResult>> GetAsync(const StoredKey& route, const StoredKey& key,
                                          GetOptions get = {}, const CallOptions& call = {});
  void GetAsync(const StoredKey& route, const StoredKey& key, GetOptions get,
                std::function<void(Result<GetResult>)> done, const CallOptions& call = {});
  std::future<Result<bool>> DeleteAsync(const StoredKey& route, const StoredKey& key,
                                        const CallOptions& call = {});
  void DeleteAsync(const StoredKey& route, const StoredKey& key,
                   std::function<void(Result<bool>)> done, const CallOptions& call = {});
  std::future<Status> PinAsync(const StoredKey& route, const StoredKey& key, bool pin = true,
                               const CallOptions& call = {});
  void PinAsync(const StoredKey& route, const StoredKey& key, bool pin,
                std::function<void(Status)> done, const CallOptions& call = {});
  std::future<Result<std::string>> StatsAsync(size_t server_index, const CallOptions& call = {});
  void StatsAsync(size_t server_index, std::function<void(Result<std::string>)> done,
                  const CallOptions& call = {});

  class Impl;

 private:
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Splits "host:port" / "[v6]:port" into host and port. Errors: InvalidArgument when the
// form is wrong (an IPv6 address without brackets included: "::1:7470" is ambiguous) or
// the port is not a decimal number in 1..65535.
Result<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& address);

// Rendezvous choice among `servers` for `key` (exposed for tests and other clients).
// REQUIRES: servers non-empty.
size_t RendezvousPick(std::span<const std::string> servers, const StoredKey& key);

// Every index into `servers`, highest rendezvous score for `key` first: the owner,
// then the server its chains fail over to, and so on. RendezvousOrder(s, k)[0] ==
// RendezvousPick(s, k). REQUIRES: servers non-empty.
std::vector<size_t> RendezvousOrder(std::span<const std::string> servers, const StoredKey& key);

}  // namespace kvstash
