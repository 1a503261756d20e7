// RocksTier: T1, the chunk records of a Store in one RocksDB database on local disk.
//
// Column families (docs/format/store.md): "meta" (key -> MetaRecord, 88 bytes),
// "payload" (key -> payload bytes) and "state" (key -> recurrent-state record); the
// payload and state families use BlobDB (enable_blob_files, min_blob_size), so large
// values live in blob files and compactions move only references. Keys are the 16-byte
// stored chunk keys. The WAL is on; writes go through WriteBatches, so a batch is
// fully visible or fully absent after a crash.
//
// Thread-safety: all methods may be called concurrently (RocksDB is thread-safe);
// batches are not shared between threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/prefix_key.h"
#include "common/result.h"

namespace rocksdb {
class DB;
class Env;
class ColumnFamilyHandle;
class Snapshot;
class WriteBatch;
}  // namespace rocksdb

namespace kvstash::store {

struct RocksTierOptions {
  std::string path;                 // database directory (created if missing)
  uint64_t blob_min_bytes = 64 << 10;
  bool sync_writes = false;         // fsync the WAL per write
  uint64_t block_cache_bytes = 64 << 20;
  std::shared_ptr<rocksdb::Env> env;  // nullptr: Env::Default()
};

class RocksTier {
 public:
  // Opens or creates the database with its three column families.
  // Errors: IOError (with RocksDB's message) when it cannot be opened.
  static Result<std::unique_ptr<RocksTier>> Open(const RocksTierOptions& options);
  ~RocksTier();

  // A set of writes committed together by Write().
  class Batch {
   public:
    Batch();
    ~Batch();
    Batch(Batch&&) noexcept;
    // meta, payload and state of one chunk; an empty `state` deletes any old one.
    void PutChunk(const StoredKey& key, std::string_view meta, std::span<const uint8_t> payload,
                  std::span<const uint8_t> state);
    void PutMeta(const StoredKey& key, std::string_view meta);
    // Deletes payload and state, keeps meta (the chunk moved to T2).
    void DeleteValues(const StoredKey& key);
    // Deletes meta, payload and state.
    void DeleteChunk(const StoredKey& key);
    uint64_t count() const;

   private:
    friend class RocksTier;
    explicit Batch(RocksTier* tier);
    RocksTier* tier_ = nullptr;
    std::unique_ptr<rocksdb::WriteBatch> wb_;
  };
  Batch NewBatch();
  // Commits `batch` atomically (WAL on). Errors: IOError (nothing committed).
  Status Write(Batch& batch);

  // A consistent read view; released on destruction.
  class Snapshot {
   public:
    ~Snapshot();
    Snapshot(const Snapshot&) = delete;
    Snapshot& operator=(const Snapshot&) = delete;

   private:
    friend class RocksTier;
    Snapshot(rocksdb::DB* db, const rocksdb::Snapshot* snap) : db_(db), snap_(snap) {}
    rocksdb::DB* db_;
    const rocksdb::Snapshot* snap_;
  };
  std::unique_ptr<Snapshot> TakeSnapshot();

  struct Value {
    bool found = false;     // meta and payload present
    std::string meta;
    std::string payload;
    std::string state;      // empty when absent
  };
  // Reads meta, payload and state of `keys` with one MultiGet under `snapshot` (a
  // fresh one when null). Errors: IOError for any read failure other than not-found.
  Result<std::vector<Value>> Read(std::span<const StoredKey> keys,
                                  const Snapshot* snapshot = nullptr);

  // Calls fn(key, meta bytes) for every row of the meta family (a snapshot iterator).
  // Rows whose key is not 16 bytes are skipped and counted in *skipped.
  // Errors: IOError from the iterator.
  Status ScanMeta(const std::function<void(const StoredKey&, std::string_view)>& fn,
                  uint64_t* skipped);

  // Clears a background error (e.g. after a disk-full write failed and space came
  // back) so writes are accepted again. Errors: IOError when RocksDB cannot resume.
  Status Resume();

  // Size of live SST + blob files (RocksDB properties), bytes.
  uint64_t DiskBytes();

 private:
  RocksTier() = default;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // default, meta, payload, state
  std::shared_ptr<rocksdb::Env> env_;
  bool sync_writes_ = false;
  rocksdb::ColumnFamilyHandle* meta_cf() const { return handles_[1]; }
  rocksdb::ColumnFamilyHandle* payload_cf() const { return handles_[2]; }
  rocksdb::ColumnFamilyHandle* state_cf() const { return handles_[3]; }
};

}  // namespace kvstash::store
