// Helpers of the store tests: temporary directories, deterministic prefix chains with
// payloads, and redis-server processes started on free loopback ports.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/prefix_key.h"
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
  // ChunkPut views of chunks [begin, end) (parents linked; spans into this Chain).
  std::vector<ChunkPut> Puts(size_t begin, size_t end) const;
  std::vector<ChunkPut> Puts() const { return Puts(0, keys.size()); }
};
Chain MakeChain(const Digest256& ns, uint64_t seed, size_t n_chunks, size_t payload_bytes,
                uint32_t chunk_tokens = 256, bool with_state = false,
                size_t extra_tokens = 0);

// True when `redis-server` and `redis-cli` are on PATH.
bool RedisInstalled();

// A redis-server child process on a free loopback port, killed on destruction.
class RedisServer {
 public:
  // Starts it (cluster mode when `cluster`, config files in `dir`) and waits until it
  // answers PING. Returns nullptr (with *error set) when it does not come up.
  // `port`: 0 picks a free one (3 attempts); otherwise that port (one attempt).
  static std::unique_ptr<RedisServer> Start(const std::string& dir, bool cluster,
                                            std::string* error, int port = 0);
  ~RedisServer();
  int port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

// Three cluster-mode servers joined with `redis-cli --cluster create`, waiting for
// cluster_state:ok on every node. Returns false (with *error) on failure.
bool StartCluster(const std::string& dir, std::vector<std::unique_ptr<RedisServer>>* nodes,
                  std::string* error);

// Runs a program with arguments, returns its exit status (-1: could not run) and its
// standard output in *out.
int RunProgram(const std::vector<std::string>& argv, std::string* out);

}  // namespace kvstash::store::testing
