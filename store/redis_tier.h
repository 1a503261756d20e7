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
// Thread-safety: as RedisRouter (calls serialised internally).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/prefix_key.h"
#include "common/result.h"
#include "store/meta_record.h"
#include "store/redis_router.h"
#include "store/store_options.h"
#include "store/store_types.h"

namespace kvstash::store {

class RedisTier {
 public:
  // Errors: RedisRouter::Connect's.
  static Result<std::unique_ptr<RedisTier>> Open(const RedisOptions& options);

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
  RedisRouter& router() { return *router_; }

 private:
  RedisTier(std::string prefix, std::unique_ptr<RedisRouter> router)
      : prefix_(std::move(prefix)), router_(std::move(router)) {}
  std::string prefix_;
  std::unique_ptr<RedisRouter> router_;
};

}  // namespace kvstash::store
