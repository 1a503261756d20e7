// Helpers of the store tests: temporary directories, deterministic prefix chains with
// payloads, and redis-server processes started on free loopback ports.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvstash/prefix_key.h"
#include "store/store.h"

namespace kvstash::store::testing {

// A directory under $TMPDIR removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Deterministic pseudo-random bytes (SplitMix64 of seed).
std::vector<uint8_t> Bytes(uint64_t seed, size_t n);

// Namespace digest of a SmolLM2-shaped namespace with the given fields.
Digest256 TestNamespace(const std::string& fingerprint = "smollm2",
                        const std::string& adapter_name = "", const std::string& adapter_id = "",
                        const std::string& cache_salt = "");

// A prefix chain: keys of `n_chunks` chunks of `chunk_tokens` tokens under `ns`, with
// payloads of `payload_bytes` (and states when `with_state`) derived from `seed`.
struct Chain {
  std::vector<uint32_t> tokens;
  std::vector<ChunkKey> keys;
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<std::vector<uint8_t>> states;  // empty vectors: no state

  std::vector<StoredKey> stored() const;
  // PutChunk views of chunks [begin, end) (parents linked; spans into this Chain).
  std::vector<PutChunk> Puts(size_t begin, size_t end) const;
  std::vector<PutChunk> Puts() const { return Puts(0, keys.size()); }
};
Chain MakeChain(const Digest256& ns, uint64_t seed, size_t n_chunks, size_t payload_bytes,
                uint32_t chunk_tokens = 256, bool with_state = false,
                size_t extra_tokens = 0);

// True when `redis-server` and `redis-cli` are on PATH.
bool RedisInstalled();

// Where and how a RedisServer runs. Default: on loopback, a free port, no launcher.
struct RedisLaunch {
  // Words run before `redis-server` (found on PATH), e.g. {"ip", "netns", "exec", "ns"}
  // to start it inside a network namespace. Default: none.
  std::vector<std::string> launcher;
  // Address it binds and PINGs are sent to (from the calling thread's network
  // namespace). Default: 127.0.0.1.
  std::string host = "127.0.0.1";
  // 0: a free loopback port (3 attempts; only meaningful for host 127.0.0.1 without a
  // launcher); otherwise that port (one attempt). Default: 0.
  int port = 0;
  // cluster-node-timeout in cluster mode: how long a master may be unreachable before
  // its replica takes over. Default: 5000.
  int cluster_node_timeout_ms = 5000;
};

// A redis-server child process, killed on destruction.
class RedisServer {
 public:
  // Starts it (cluster mode when `cluster`, config files in `dir`) and waits until it
  // answers PING. Returns nullptr (with *error set) when it does not come up.
  // `port`: 0 picks a free one (3 attempts); otherwise that port (one attempt).
  static std::unique_ptr<RedisServer> Start(const std::string& dir, bool cluster,
                                            std::string* error, int port = 0);
  static std::unique_ptr<RedisServer> Start(const std::string& dir, bool cluster,
                                            std::string* error, const RedisLaunch& launch);
  ~RedisServer();
  int port() const { return port_; }
  const std::string& host() const { return host_; }
  std::string endpoint() const { return host_ + ":" + std::to_string(port_); }
  // SIGKILLs it and waits for the exit (no-op when it has exited).
  void Kill();

 private:
  pid_t pid_ = -1;
  std::string host_;
  int port_ = 0;
};

// The text of a string or status reply to `cmd` (one word or words split on spaces,
// hiredis' format) from the node at host:port; "" when it cannot be reached.
std::string RedisReplyText(const std::string& host, int port, const char* cmd);

// Shape of a test Redis Cluster. Default: 3 masters, no replicas, free loopback ports.
struct ClusterLaunch {
  RedisLaunch node;  // node.port != 0: nodes on node.port, node.port + 1, ...
  int masters = 3;
  int replicas_per_master = 0;
};

// `masters * (1 + replicas_per_master)` cluster-mode servers joined with `redis-cli
// --cluster create` (run from the calling thread's network namespace), waiting for
// cluster_state:ok on every node and, with replicas, for every replica's link to its
// master. Returns false (with *error) on failure.
bool StartCluster(const std::string& dir, std::vector<std::unique_ptr<RedisServer>>* nodes,
                  std::string* error, const ClusterLaunch& launch = {});

// Runs a program with arguments, returns its exit status (-1: could not run) and its
// standard output in *out.
int RunProgram(const std::vector<std::string>& argv, std::string* out);

}  // namespace kvstash::store::testing
