// RedisRouter: sends commands to a single Redis node or to a Redis Cluster, on top of
// hiredis synchronous contexts (hiredis 0.14 has no cluster support).
//
// Cluster routing follows the Redis Cluster specification (redis.io/docs/reference/
// cluster-spec): the slot map comes from CLUSTER SLOTS at connect time; each command
// goes to the master of its key's slot (store/redis_slot.h); a MOVED reply updates
// that slot's owner and retries there; an ASK reply retries once on the named node
// preceded by ASKING; TRYAGAIN / CLUSTERDOWN retry. Commands for one node are
// pipelined (all appended, then all replies read), one batch per node per round.
// A broken connection is reopened once per round. In a cluster, a node that cannot
// be reached makes the router re-read the slot map (CLUSTER SLOTS) from another
// known node, at most once per Execute, and retry that node's commands where the new
// map sends them: after a replica has taken over a dead master's slots, commands go
// to it (before the takeover they fail). A command whose node still cannot be
// reached fails with Unavailable.
//
// Thread-safety: Execute may be called from several threads; calls are serialised by
// an internal mutex (one connection per node).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "kvstash/result.h"

struct redisContext;

namespace kvstash::store {

struct RedisReply {
  enum class Type : uint8_t { kNil, kString, kStatus, kInteger, kArray, kError };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus, kError
  int64_t integer = 0;
  std::vector<RedisReply> elements;  // kArray
};

struct RedisCommand {
  std::string key;                // routes the command (its slot)
  std::vector<std::string> argv;  // command name and arguments, binary-safe
};

struct RedisRouterOptions {
  std::vector<std::string> endpoints;  // "host:port"
  int connect_timeout_ms = 500;
  int command_timeout_ms = 2000;
  int max_redirects = 5;
};

class RedisRouter {
 public:
  // Connects to the first endpoint that answers and reads the cluster slot map; a
  // node that replies to CLUSTER SLOTS with an error (cluster support disabled) is
  // used as a single node. Errors: InvalidArgument for a malformed endpoint;
  // Unavailable when no endpoint answers; Corruption for a malformed slot map.
  static Result<std::unique_ptr<RedisRouter>> Connect(const RedisRouterOptions& options);
  ~RedisRouter();

  // Runs `commands` and returns one result per command, in order: a reply (an error
  // reply other than a redirection is a kError reply), or Unavailable when its node
  // cannot be reached or redirections exceed max_redirects.
  std::vector<Result<RedisReply>> Execute(std::span<const RedisCommand> commands);

  bool cluster() const { return cluster_; }
  // Nodes known (masters from the slot map, plus redirection targets).
  size_t node_count() const;
  // Number of MOVED and ASK replies followed since Connect.
  uint64_t redirects() const;

 private:
  struct Node {
    std::string host;
    int port = 0;
    redisContext* ctx = nullptr;
  };
  explicit RedisRouter(const RedisRouterOptions& options) : options_(options) {}
  Status EnsureConnected(Node& node) KVSTASH_REQUIRES(mu_);
  void Disconnect(Node& node) KVSTASH_REQUIRES(mu_);
  int NodeFor(const std::string& host, int port) KVSTASH_REQUIRES(mu_);
  Status LoadSlots(int node) KVSTASH_REQUIRES(mu_);
  // LoadSlots from the first known node other than `unreachable` that answers.
  // Errors: Unavailable when none does.
  Status ReloadSlots(int unreachable) KVSTASH_REQUIRES(mu_);

  RedisRouterOptions options_;
  mutable Mutex mu_;
  std::vector<Node> nodes_ KVSTASH_GUARDED_BY(mu_);
  std::array<int16_t, 16384> slots_ KVSTASH_GUARDED_BY(mu_) = {};  // slot -> node index, -1 unknown
  // Written by LoadSlots (under mu_: at Connect, and again when a failover reloads the
  // slot map); read by cluster() without the lock, hence atomic.
  std::atomic<bool> cluster_{false};
  uint64_t redirects_ KVSTASH_GUARDED_BY(mu_) = 0;
};

// Splits "host:port". Errors: InvalidArgument.
Status ParseEndpoint(const std::string& endpoint, std::string* host, int* port);

}  // namespace kvstash::store
