#include "store/rocks_tier.h"

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <sys/statvfs.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/logging.h"
#include "store/rocks_logger.h"

namespace kvstash::store {
namespace {

constexpr const char* kMetaFamily = "meta";
constexpr const char* kPayloadFamily = "payload";
constexpr const char* kStateFamily = "state";

rocksdb::Slice KeySlice(const StoredKey& key) {
  return rocksdb::Slice(reinterpret_cast<const char*>(key.data()), key.size());
}
rocksdb::Slice BytesSlice(std::span<const uint8_t> b) {
  return rocksdb::Slice(reinterpret_cast<const char*>(b.data()), b.size());
}
// Bytes of write-ahead log files (NNNNNN.log) in the database directory; 0 when it
// cannot be listed.
uint64_t WalBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".log") continue;
    std::error_code size_ec;
    const uintmax_t n = e.file_size(size_ec);
    if (!size_ec) total += n;
  }
  return total;
}

// True when the file system holding `dir` is mounted read-only (e.g. remounted so by
// the kernel after I/O errors: ext4 errors=remount-ro).
bool FileSystemIsReadOnly(const std::string& dir) {
  struct statvfs st;
  return statvfs(dir.c_str(), &st) == 0 && (st.f_flag & ST_RDONLY) != 0;
}

// Room for the small files a read-write open writes beside the flushed WAL.
constexpr uint64_t kOpenMarginBytes = 1 << 20;

std::string Mib(uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return Status::Ok();
  return Status::IOError(std::string(what) + ": " + s.ToString());
}

}  // namespace

Result<std::unique_ptr<RocksTier>> RocksTier::Open(const RocksTierOptions& o) {
  if (o.path.empty()) return Status::InvalidArgument("RocksDB path is empty");
  std::unique_ptr<RocksTier> t(new RocksTier());
  t->env_ = o.env;
  t->sync_writes_ = o.sync_writes;

  rocksdb::DBOptions db_opts;
  db_opts.create_if_missing = true;
  db_opts.create_missing_column_families = true;
  db_opts.max_background_jobs = 2;
  // RocksDB's info log goes to our logger, not a LOG file on the data disk (a full
  // disk must not abort the process: store/rocks_logger.h).
  db_opts.info_log = MakeRocksLogger();
  if (o.env) db_opts.env = o.env.get();

  std::shared_ptr<rocksdb::Cache> cache = rocksdb::NewLRUCache(o.block_cache_bytes);
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = cache;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.cache_index_and_filter_blocks = true;

  rocksdb::ColumnFamilyOptions meta_opts;
  meta_opts.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  meta_opts.compression = rocksdb::kNoCompression;  // 88-byte records of hashes

  // Payloads are codec-compressed already and state records are float tensors: no
  // block or blob compression. Values >= blob_min_bytes go to blob files; garbage
  // collection rewrites blob files whose values were deleted or overwritten.
  rocksdb::ColumnFamilyOptions blob_opts;
  blob_opts.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  blob_opts.compression = rocksdb::kNoCompression;
  blob_opts.enable_blob_files = true;
  blob_opts.min_blob_size = o.blob_min_bytes;
  blob_opts.blob_compression_type = rocksdb::kNoCompression;
  blob_opts.enable_blob_garbage_collection = true;
  blob_opts.blob_garbage_collection_age_cutoff = 0.25;

  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {kMetaFamily, meta_opts},
      {kPayloadFamily, blob_opts},
      {kStateFamily, blob_opts},
  };
  t->path_ = o.path;
  for (const auto& f : families) {
    t->reserve_bytes_ = std::max<uint64_t>(t->reserve_bytes_, f.options.write_buffer_size);
  }
  // RocksDB lists the directory before it creates it and logs a missing one as an error
  // line on every first open: create it first (not its parents, as RocksDB does not).
  rocksdb::Env* env = o.env ? o.env.get() : rocksdb::Env::Default();
  if (rocksdb::Status made = env->CreateDirIfMissing(o.path); !made.ok()) {
    return FromRocks(made, "cannot create the RocksDB directory " + o.path +
                               " (it must be a folder, or a missing one whose parent folder exists and is writable)");
  }
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_opts, o.path, families, &t->handles_, &db);
  t->read_only_filesystem_ = !s.ok() && FileSystemIsReadOnly(o.path);
  if (s.IsNoSpace() || t->read_only_filesystem_) {
    // A full disk or a read-only file system: the read-write open needs new files, a
    // read-only one writes nothing (it replays the WAL into memory) and keeps every
    // acknowledged write readable.
    t->handles_.clear();
    if (!t->read_only_filesystem_) {
      // OpenForReadOnly takes no LOCK: take RocksDB's own lock on the LOCK file (an
      // fcntl lock, which a read-write open by another process or this one then fails
      // to take), so no writer can change the database under the reads this tier
      // serves. (On a read-only file system no process can write, nor open LOCK.)
      rocksdb::Status lock = env->LockFile(o.path + "/LOCK", &t->read_only_lock_);
      if (!lock.ok()) {
        return FromRocks(lock, "opening RocksDB at " + o.path + ": another server or store has "
                         "this directory open (its LOCK file is held)");
      }
      t->lock_env_ = env;
    }
    rocksdb::Status ro = rocksdb::DB::OpenForReadOnly(db_opts, o.path, families, &t->handles_, &db);
    if (!ro.ok()) {
      return FromRocks(s, "opening RocksDB at " + o.path + " (read-only too: " + ro.ToString() + ")");
    }
    t->read_only_ = true;
    s = ro;
  }
  if (!s.ok() && s.ToString().find(o.path + "/LOCK") != std::string::npos) {
    return FromRocks(s, "opening RocksDB at " + o.path + ": another server or store has this "
                     "directory open (its LOCK file is held)");
  }
  if (!s.ok()) return FromRocks(s, "opening RocksDB at " + o.path);
  t->db_.reset(db);
  return t;
}

Status RocksTier::CheckWritable() const {
  if (read_only_filesystem_) {
    return Status::IOError("RocksDB at " + path_ + " is open read-only: its file system is "
                           "mounted read-only (the kernel does that after I/O errors: check its "
                           "log and the disk); remount it read-write and restart to accept "
                           "writes");
  }
  if (read_only_) {
    return Status::IOError("RocksDB at " + path_ + " is open read-only: its read-write open at "
                           "start-up failed for lack of space (" + Mib(FreeBytes()) +
                           " free now; restart once " + Mib(FreeBytesNeeded()) +
                           " are free to accept writes: the open flushes the write-ahead log "
                           "it replays)");
  }
  if (needs_restart_) {
    return Status::IOError("RocksDB at " + path_ + " cannot write: its write-ahead log failed "
                           "while the disk was full and RocksDB cannot resume it in place "
                           "(facebook/rocksdb#11643): restart once " + Mib(FreeBytesNeeded()) +
                           " are free to accept writes (" + Mib(FreeBytes()) + " free now; "
                           "nothing acknowledged is lost)");
  }
  return Status::Ok();
}

RocksTier::~RocksTier() {
  if (db_) {
    for (rocksdb::ColumnFamilyHandle* h : handles_) {
      (void)db_->DestroyColumnFamilyHandle(h);
    }
    (void)db_->Close();
    db_.reset();
  }
  if (read_only_lock_) (void)lock_env_->UnlockFile(read_only_lock_);
}

RocksTier::Batch::Batch() = default;
RocksTier::Batch::~Batch() = default;
RocksTier::Batch::Batch(Batch&&) noexcept = default;
RocksTier::Batch::Batch(RocksTier* tier)
    : tier_(tier), wb_(std::make_unique<rocksdb::WriteBatch>()) {}

RocksTier::Batch RocksTier::NewBatch() { return Batch(this); }

void RocksTier::Batch::PutChunk(const StoredKey& key, std::string_view meta,
                                std::span<const uint8_t> payload,
                                std::span<const uint8_t> state) {
  (void)wb_->Put(tier_->meta_cf(), KeySlice(key), rocksdb::Slice(meta.data(), meta.size()));
  (void)wb_->Put(tier_->payload_cf(), KeySlice(key), BytesSlice(payload));
  if (state.empty()) {
    (void)wb_->Delete(tier_->state_cf(), KeySlice(key));
  } else {
    (void)wb_->Put(tier_->state_cf(), KeySlice(key), BytesSlice(state));
  }
}

void RocksTier::Batch::PutMeta(const StoredKey& key, std::string_view meta) {
  (void)wb_->Put(tier_->meta_cf(), KeySlice(key), rocksdb::Slice(meta.data(), meta.size()));
}

void RocksTier::Batch::DeleteValues(const StoredKey& key) {
  (void)wb_->Delete(tier_->payload_cf(), KeySlice(key));
  (void)wb_->Delete(tier_->state_cf(), KeySlice(key));
}

void RocksTier::Batch::DeleteChunk(const StoredKey& key) {
  (void)wb_->Delete(tier_->meta_cf(), KeySlice(key));
  DeleteValues(key);
}

uint64_t RocksTier::Batch::count() const { return wb_ ? wb_->Count() : 0; }

Status RocksTier::Write(Batch& batch) {
  KVSTASH_RETURN_IF_ERROR(CheckWritable());
  MutexLock lock(write_mu_);
  if (wal_after_error_) {
    KVSTASH_RETURN_IF_ERROR(SwitchWal());
    wal_after_error_ = false;
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync_writes_;
  rocksdb::Status s = db_->Write(wo, batch.wb_.get());
  if (!s.ok()) wal_after_error_ = true;
  return FromRocks(s, "RocksDB write");
}

Status RocksTier::SwitchWal() {
  rocksdb::WriteOptions no_wal;
  no_wal.disableWAL = true;
  KVSTASH_RETURN_IF_ERROR(FromRocks(db_->Put(no_wal, default_cf(), "kvstash.wal-switch", ""),
                                    "RocksDB write (new WAL after a failed write)"));
  rocksdb::FlushOptions fo;
  fo.wait = true;
  const rocksdb::Status s = db_->Flush(fo, default_cf());
  if (!s.ok() && !s.IsNoSpace()) {
    KVSTASH_LOG_ERROR("store: RocksDB at {} cannot move to a new WAL file after a failed "
                      "write ({}): T1 takes no more writes until a restart", path_, s.ToString());
    needs_restart_ = true;
    return CheckWritable();
  }
  return FromRocks(s, "RocksDB flush (new WAL after a failed write)");
}

RocksTier::Snapshot::~Snapshot() { db_->ReleaseSnapshot(snap_); }

std::unique_ptr<RocksTier::Snapshot> RocksTier::TakeSnapshot() {
  return std::unique_ptr<Snapshot>(new Snapshot(db_.get(), db_->GetSnapshot()));
}

Result<std::vector<RocksTier::Value>> RocksTier::Read(std::span<const StoredKey> keys,
                                                      const Snapshot* snapshot) {
  std::unique_ptr<Snapshot> own;
  if (snapshot == nullptr) {
    own = TakeSnapshot();
    snapshot = own.get();
  }
  const size_t n = keys.size();
  std::vector<rocksdb::ColumnFamilyHandle*> cfs;
  std::vector<rocksdb::Slice> slices;
  cfs.reserve(3 * n);
  slices.reserve(3 * n);
  for (rocksdb::ColumnFamilyHandle* cf : {meta_cf(), payload_cf(), state_cf()}) {
    for (const StoredKey& k : keys) {
      cfs.push_back(cf);
      slices.push_back(KeySlice(k));
    }
  }
  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot->snap_;
  std::vector<std::string> values;
  std::vector<rocksdb::Status> st = db_->MultiGet(ro, cfs, slices, &values);
  std::vector<Value> out(n);
  for (size_t i = 0; i < 3 * n; ++i) {
    if (st[i].IsCorruption()) {
      out[i % n].corrupt = true;
    } else if (!st[i].ok() && !st[i].IsNotFound()) {
      return FromRocks(st[i], "RocksDB MultiGet");
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Value& v = out[i];
    if (v.corrupt) continue;
    v.found = st[i].ok() && st[n + i].ok();
    if (!v.found) continue;
    v.meta = std::move(values[i]);
    v.payload = std::move(values[n + i]);
    if (st[2 * n + i].ok()) v.state = std::move(values[2 * n + i]);
  }
  return out;
}

Status RocksTier::ScanMeta(const std::function<void(const StoredKey&, std::string_view)>& fn,
                           uint64_t* skipped) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), meta_cf()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() != sizeof(StoredKey)) {
      if (skipped) ++*skipped;
      continue;
    }
    StoredKey key;
    std::memcpy(key.data(), k.data(), key.size());
    fn(key, std::string_view(it->value().data(), it->value().size()));
  }
  return FromRocks(it->status(), "RocksDB meta scan");
}

Status RocksTier::Flush() {
  KVSTASH_RETURN_IF_ERROR(CheckWritable());
  rocksdb::FlushOptions fo;
  fo.wait = true;
  return FromRocks(db_->Flush(fo, handles_), "RocksDB flush");
}

Status RocksTier::Resume() {
  KVSTASH_RETURN_IF_ERROR(CheckWritable());
  return FromRocks(db_->Resume(), "RocksDB resume");
}

uint64_t RocksTier::FreeBytes() const {
  std::error_code ec;
  const std::filesystem::space_info space = std::filesystem::space(path_, ec);
  return ec ? 0 : space.available;
}

uint64_t RocksTier::FreeBytesNeeded() const {
  if (read_only_filesystem_) return 0;  // space is not what it lacks
  if (!read_only_ && !needs_restart_) return reserve_bytes_;
  // The read-write open writes a new MANIFEST, OPTIONS file and WAL (KiBs) and flushes
  // the replayed WAL into table and blob files of about its size (no compression).
  return WalBytes(path_) + kOpenMarginBytes;
}

uint64_t RocksTier::DiskBytes() {
  uint64_t sst = 0, blob = 0;
  (void)db_->GetAggregatedIntProperty("rocksdb.live-sst-files-size", &sst);
  (void)db_->GetAggregatedIntProperty("rocksdb.live-blob-file-size", &blob);
  return sst + blob;
}

}  // namespace kvstash::store
