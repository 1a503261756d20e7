// RedisTier: T2, chunk records in Redis (single node or Redis Cluster) shared by
// several kvstash nodes.
//
// Each chunk is one Redis hash at "<key_prefix><32 hex digits of the stored key>"
// with fields "m" (the 88-byte MetaRecord, store/meta_record.h), "p" (payload) and
// "s" (state record, only when the meta says there is one). One HSET writes all
// fields, so a reader sees the whole record or none of it; a Get re-checks the
// meta's XXH3-64 of payload and state and reports Corruption on a mismatch.
// Layout in docs/format/store.md.
//
// Start-up without Redis: when no endpoint answers at Open, the tier still opens, down
// (up() false): every call fails Unavailable at once (the store then treats T2 as
// absent for that call: evictions remove instead of demoting, reads miss), and a
// background thread retries the connection with exponential backoff (250 ms doubling
// to 30 s, each attempt bounded by connect_timeout_ms per endpoint) until it succeeds.
// up() also turns false while calls fail Unavailable at run time, true again on the
// next call that reaches Redis.
//
// Thread-safety: as RedisRouter (calls serialised internally); up() is lock-free.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <thread>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "kvstash/prefix_key.h"
#include "kvstash/result.h"
#include "store/meta_record.h"
#include "store/redis_router.h"
#include "store/store_options.h"
#include "store/store_types.h"

namespace kvstash::store {

class RedisTier {
 public:
  // Errors: RedisRouter::Connect's, except Unavailable (no endpoint answers): then the
  // tier opens down and reconnects in the background (see above).
  static Result<std::unique_ptr<RedisTier>> Open(const RedisOptions& options);
  ~RedisTier();
  RedisTier(const RedisTier&) = delete;
  RedisTier& operator=(const RedisTier&) = delete;

  // Connected and the last call reached Redis.
  bool up() const { return up_.load(std::memory_order_relaxed); }

  struct Item {
    StoredKey key{};
    MetaRecord meta;
    SharedBytes payload;
    SharedBytes state;  // null when none
  };
  // Writes each item (one pipelined HSET per item). One Status per item.
  std::vector<Status> Put(std::span<const Item> items);

  // Reads each key: nullopt when absent; Corruption when the record is malformed or a
  // checksum fails; Unavailable when Redis cannot be reached.
  std::vector<Result<std::optional<Item>>> Get(std::span<const StoredKey> keys);

  // Reads only the meta records (for Lookup). Same errors as Get, without payloads.
  std::vector<Result<std::optional<MetaRecord>>> GetMeta(std::span<const StoredKey> keys);

  // Deletes each key (absent keys are fine). One Status per key.
  std::vector<Status> Delete(std::span<const StoredKey> keys);

  std::string RedisKey(const StoredKey& key) const;

 private:
  RedisTier(std::string prefix, RedisRouterOptions options, std::shared_ptr<RedisRouter> router);
  // The router, or null while down.
  std::shared_ptr<RedisRouter> Router() const KVSTASH_EXCLUDES(mu_);
  // Runs commands; all Unavailable while down. Keeps up_ current.
  std::vector<Result<RedisReply>> Execute(std::span<const RedisCommand> commands);
  void Reconnect() KVSTASH_EXCLUDES(mu_);  // the background thread's loop

  const std::string prefix_;
  const RedisRouterOptions options_;
  mutable Mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ KVSTASH_GUARDED_BY(mu_) = false;
  std::shared_ptr<RedisRouter> router_ KVSTASH_GUARDED_BY(mu_);
  std::atomic<bool> up_{false};
  std::thread reconnect_;
};

}  // namespace kvstash::store
