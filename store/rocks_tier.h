// RocksTier: T1, the chunk records of a Store in one RocksDB database on local disk.
//
// Column families (docs/format/store.md): "meta" (key -> MetaRecord, 88 bytes),
// "payload" (key -> payload bytes) and "state" (key -> recurrent-state record); the
// payload and state families use BlobDB (enable_blob_files, min_blob_size), so large
// values live in blob files and compactions move only references. Keys are the 16-byte
// stored chunk keys. The WAL is on; writes go through WriteBatches, so a batch is
// fully visible or fully absent after a crash.
// A database that cannot be opened for writing because its disk is full (RocksDB writes
// a new MANIFEST, OPTIONS file and WAL at every open) is opened read-only instead: reads
// are served, every write fails with IOError, until it is reopened with space to spare;
// so is one on a file system mounted read-only (read_only_filesystem()).
// Either way the database's LOCK file is held while the tier is open, so a second
// read-write open of the same directory (another server, another Store) fails.
//
// Thread-safety: all methods may be called concurrently (RocksDB is thread-safe);
// batches are not shared between threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "kvstash/prefix_key.h"
#include "kvstash/result.h"

namespace rocksdb {
class DB;
class Env;
class FileLock;
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
  // Opens or creates the database with its three column families; on a full disk
  // (RocksDB's NoSpace) or a read-only file system (statvfs ST_RDONLY) an existing
  // database is opened read-only (read_only()).
  // Errors: IOError (with RocksDB's message) when it cannot be opened at all, or when
  // another process or RocksTier holds the directory's LOCK.
  static Result<std::unique_ptr<RocksTier>> Open(const RocksTierOptions& options);
  ~RocksTier();

  // True when Open fell back to a read-only database (a full disk at open): Write,
  // Resume and Flush fail with IOError; reads and snapshots work as usual.
  bool read_only() const { return read_only_; }
  // True when read_only() because the file system is mounted read-only (not full).
  bool read_only_filesystem() const { return read_only_filesystem_; }
  // True once the WAL file's writer failed and RocksDB cannot move to a new WAL file
  // (see Write): like read_only() (writes fail, reads are served) until a reopen.
  bool needs_restart() const { return needs_restart_.load(); }
  // Ok, or (read_only(), needs_restart()) the IOError every write returns, naming the
  // path, the cause and the fix.
  Status CheckWritable() const;

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
  // Commits `batch` atomically (WAL on). Errors: IOError (nothing committed; always
  // when read_only()).
  // After a failed write the next one first moves RocksDB to a fresh WAL file
  // (SwitchWal). RocksDB 7.8 (Debian's) keeps the WAL file whose writer saw an error
  // (a full disk at an append) across its recovery, and the next append to it aborts
  // the process in WritableFileWriter (built with assertions) or fails for good
  // (facebook/rocksdb#11643, fixed upstream in #12767); it cannot switch away from that
  // file either. So when the switch fails for any reason but NoSpace, no write reaches
  // RocksDB again: needs_restart() is set and every write fails with an IOError saying
  // to restart (the reopen replays the WAL up to the failure: nothing acknowledged is
  // lost).
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
    bool corrupt = false;   // RocksDB's own checksums failed on this key's values
    std::string meta;
    std::string payload;
    std::string state;      // empty when absent
  };
  // Reads meta, payload and state of `keys` with one MultiGet under `snapshot` (a
  // fresh one when null). A key whose blocks or blob records fail RocksDB's checksums
  // is reported with `corrupt` set. Errors: IOError for any other read failure.
  Result<std::vector<Value>> Read(std::span<const StoredKey> keys,
                                  const Snapshot* snapshot = nullptr);

  // Calls fn(key, meta bytes) for every row of the meta family (a snapshot iterator).
  // Rows whose key is not 16 bytes are skipped and counted in *skipped.
  // Errors: IOError from the iterator.
  Status ScanMeta(const std::function<void(const StoredKey&, std::string_view)>& fn,
                  uint64_t* skipped);

  // Clears a background error (e.g. after a disk-full write failed and space came
  // back) so writes are accepted again. Errors: IOError when RocksDB cannot resume, or
  // read_only() (only a reopen can make a read-only database writable).
  Status Resume();

  // Flushes the memtables of every column family to SST / blob files.
  // Errors: IOError (also when read_only()).
  Status Flush();

  // Size of live SST + blob files (RocksDB properties), bytes.
  uint64_t DiskBytes();

  // Bytes available to this process on the database's file system (statvfs), or 0 when
  // they cannot be read. Thread-safe; one system call.
  uint64_t FreeBytes() const;
  // Free bytes the disk needs before writes can work again, by state:
  // - writable (after a failed write): RocksDB's reserve, the largest column family's
  //   write_buffer_size (64 MiB): its recovery from a full disk waits until that much is
  //   free (ReserveDiskBuffer in RocksDB's DB::Open);
  // - read_only(), needs_restart(): to restart read-write, the write-ahead log files
  //   (the open flushes what it replays into new files of about that size) plus 1 MiB
  //   for the MANIFEST, OPTIONS file and new WAL. (Resuming in place after a later
  //   failed write needs the reserve again.)
  // - read_only_filesystem(): 0 (space is not what it lacks).
  // Thread-safe; lists the directory in the last two states.
  uint64_t FreeBytesNeeded() const;

 private:
  RocksTier() = default;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;  // default, meta, payload, state
  std::shared_ptr<rocksdb::Env> env_;
  bool sync_writes_ = false;
  bool read_only_ = false;
  bool read_only_filesystem_ = false;
  uint64_t reserve_bytes_ = 0;  // RocksDB's disk-full reserve: the largest write_buffer_size
  // read_only(): the LOCK file, held through lock_env_ (RocksDB holds it otherwise).
  rocksdb::FileLock* read_only_lock_ = nullptr;
  rocksdb::Env* lock_env_ = nullptr;
  std::string path_;
  // Held across each Write (the Store serialises its writes already, so it is never
  // contended): a write never reaches a WAL file whose writer saw an error.
  Mutex write_mu_;
  // A write failed: the WAL file's writer may hold the error (see Write).
  bool wal_after_error_ KVSTASH_GUARDED_BY(write_mu_) = false;
  std::atomic<bool> needs_restart_{false};
  // Starts a new WAL file: a marker record in the default column family, written
  // without the WAL, then flushed, makes RocksDB switch the memtable and with it the
  // WAL. Errors: IOError while RocksDB still refuses writes (its background error) or
  // the disk is full; IOError with needs_restart() set when the switch itself fails.
  Status SwitchWal() KVSTASH_REQUIRES(write_mu_);
  rocksdb::ColumnFamilyHandle* default_cf() const { return handles_[0]; }
  rocksdb::ColumnFamilyHandle* meta_cf() const { return handles_[1]; }
  rocksdb::ColumnFamilyHandle* payload_cf() const { return handles_[2]; }
  rocksdb::ColumnFamilyHandle* state_cf() const { return handles_[3]; }
};

}  // namespace kvstash::store
