// The store on RocksDB (T1) on disk: the model with restarts, restart of entries and
// pins, a full disk, corrupted bytes on disk, snapshot reads racing eviction, and
// promotion/demotion between T0 and T1.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "common/logging.h"
#include "store/prefix_index.h"
#include "store/rocks_tier.h"
#include "store/store.h"
#include "tests/store/store_model.h"
#include "tests/store/store_test_util.h"
#include "tests/support/test_util.h"

namespace kvstash::store::testing {
namespace {

bool Same(std::span<const uint8_t> a, const std::vector<uint8_t>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

StoreOptions DiskOptions(const std::string& path) {
  StoreOptions o;
  o.path = path;
  o.memory_budget_bytes = 1 << 20;
  o.blob_min_bytes = 4096;
  return o;
}

TEST(StoreDisk, ModelWithRestarts) {
  TempDir dir;
  StoreOptions o = DiskOptions(dir.path() + "/db");
  o.memory_budget_bytes = 6 << 10;
  o.disk_budget_bytes = 24 << 10;
  o.index_budget_bytes = PrefixIndex::MaxBytesForEntries(150);
  ModelRunOptions run;
  run.ops = 20000;
  run.seed = 21;
  RunStoreModel(o, run, /*reopen=*/true);
}

TEST(StoreDisk, EntriesAndPinsSurviveARestart) {
  TempDir dir;
  const Digest256 ns = TestNamespace();
  const Chain a = MakeChain(ns, 1, 3, 10000, 256, /*with_state=*/true);
  const Chain b = MakeChain(ns, 2, 2, 500);
  {
    auto store = Store::Open(DiskOptions(dir.path())).value();
    ASSERT_OK(store->Put(a.Puts()));
    ASSERT_OK(store->Put(b.Puts()));
    ASSERT_OK_AND_ASSIGN(uint64_t n, store->Pin(a.stored()));
    EXPECT_EQ(n, 3u);
    ASSERT_OK(store->Get(b.stored()));  // hits persist at close
  }
  StoreOptions o = DiskOptions(dir.path());
  o.memory_budget_bytes = 0;  // T1 only: everything must come from disk
  o.disk_budget_bytes = 40000;
  auto store = Store::Open(o).value();
  StoreStats s = store->Stats();
  EXPECT_EQ(s.index_entries, 5u);
  EXPECT_EQ(s.pinned_entries, 3u);
  EXPECT_EQ(s.tiers[1].entries, 5u);
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(ns, a.tokens, 256, false));
  EXPECT_EQ(r.matched_tokens, 768u);
  EXPECT_EQ(r.tiers[0], Tier::kDisk);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(a.stored()));
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(got[i].found);
    EXPECT_EQ(got[i].tier, Tier::kDisk);
    EXPECT_TRUE(Same(got[i].payload_bytes(), a.payloads[i]));
    EXPECT_TRUE(Same(got[i].state_bytes(), a.states[i]));
  }
  // The pins still hold: filling T1 evicts B, never A.
  for (int i = 0; i < 5; ++i) ASSERT_OK(store->Put(MakeChain(ns, 10 + i, 1, 3000).Puts()));
  ASSERT_OK_AND_ASSIGN(r, store->Lookup(ns, a.tokens, 256, false));
  EXPECT_EQ(r.matched_tokens, 768u);
  ASSERT_OK_AND_ASSIGN(r, store->Lookup(ns, b.tokens, 256, false));
  EXPECT_EQ(r.matched_tokens, 0u);
  EXPECT_LE(store->Stats().tiers[1].bytes, 40000u);
}

// A file system whose writes fail with NoSpace while `full` is set.
class FullDiskFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FullDiskFs(std::shared_ptr<rocksdb::FileSystem> base)
      : rocksdb::FileSystemWrapper(std::move(base)) {}
  const char* Name() const override { return "FullDiskFs"; }
  std::atomic<bool> full{false};

  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> f, const std::atomic<bool>* full)
        : rocksdb::FSWritableFileOwnerWrapper(std::move(f)), full_(full) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
      if (*full_) return rocksdb::IOStatus::NoSpace("simulated full disk");
      return target()->Append(data, o, d);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& v,
                             rocksdb::IODebugContext* d) override {
      if (*full_) return rocksdb::IOStatus::NoSpace("simulated full disk");
      return target()->Append(data, o, v, d);
    }

   private:
    const std::atomic<bool>* full_;
  };
  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    std::unique_ptr<rocksdb::FSWritableFile> f;
    rocksdb::IOStatus s = target()->NewWritableFile(name, o, &f, d);
    if (s.ok()) r->reset(new File(std::move(f), &full));
    return s;
  }
};

// A store folder on a FullDiskFs (set fs->full to fill the disk).
struct FullDiskStore {
  TempDir dir;
  std::shared_ptr<FullDiskFs> fs = std::make_shared<FullDiskFs>(rocksdb::FileSystem::Default());
  std::shared_ptr<rocksdb::Env> env{rocksdb::NewCompositeEnv(fs).release()};
  StoreOptions Options() const {
    StoreOptions o = DiskOptions(dir.path());
    o.rocksdb_env = env;
    return o;
  }
};

// Expects Lookup to match exactly `n` chunks of each chain, and every stored entry (the
// sum of the n) to pass VerifyAll.
void ExpectStored(Store& store, std::initializer_list<std::pair<const Chain*, size_t>> want) {
  uint64_t entries = 0;
  for (const auto& [chain, n] : want) {
    ASSERT_OK_AND_ASSIGN(LookupResult r, store.Lookup(chain->stored(), false));
    EXPECT_EQ(r.keys.size(), n);
    entries += n;
  }
  ASSERT_OK_AND_ASSIGN(VerifyReport v, store.VerifyAll());
  EXPECT_EQ(v.entries, entries);
  EXPECT_EQ(v.verified, entries);
}

// A restart on a disk that is still full (RocksDB's read-write open fails with NoSpace)
// opens T1 read-only: every acknowledged chunk is served byte for byte, every write is
// refused with IOError and changes nothing; the next open with space is read-write.
TEST(StoreDisk, AFullDiskAtOpenServesReadsReadOnly) {
  FullDiskStore disk;
  StoreOptions o = disk.Options();
  FullDiskFs* fs = disk.fs.get();
  const Digest256 ns = TestNamespace();
  const Chain a = MakeChain(ns, 1, 3, 20000, 256, /*with_state=*/true);  // blob files
  const Chain b = MakeChain(ns, 2, 2, 100);                               // inline values
  const Chain c = MakeChain(ns, 3, 1, 100);
  {
    auto store = Store::Open(o).value();
    ASSERT_OK(store->Put(a.Puts()));
    ASSERT_OK(store->Put(b.Puts()));
    EXPECT_FALSE(store->Stats().t1_read_only);
    EXPECT_EQ(store->Stats().t1_free_bytes_needed, 64u << 20);  // RocksDB's reserve
    EXPECT_GT(store->Stats().t1_disk_free_bytes, 0u);
    fs->full = true;  // the disk fills before the close: its flush fails, the WAL stays
  }
  uint64_t wal_bytes = 0;  // what the read-write open will replay and flush
  for (const auto& e : std::filesystem::directory_iterator(disk.dir.path())) {
    if (e.path().extension() == ".log") wal_bytes += e.file_size();
  }
  ASSERT_GT(wal_bytes, 60000u);  // chain a's payloads and states are in the WAL
  {
    auto store = Store::Open(o).value();
    const StoreStats st = store->Stats();
    EXPECT_TRUE(st.t1_read_only);
    EXPECT_TRUE(st.t1_writes_failing);  // what /healthz, /metrics and the alert report
    EXPECT_EQ(st.t1_free_bytes_needed, wal_bytes + (1u << 20));  // to restart read-write
    EXPECT_EQ(st.tiers[1].entries, 5u);
    ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(a.stored(), false));
    EXPECT_EQ(r.keys.size(), 3u);
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(a.stored()));
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(got[i].found);
      EXPECT_TRUE(Same(got[i].payload_bytes(), a.payloads[i]));
      EXPECT_TRUE(Same(got[i].state_bytes(), a.states[i]));
    }
    const Status put = store->Put(c.Puts());
    EXPECT_STATUS(put, kIOError);
    EXPECT_NE(put.message().find("read-only"), std::string::npos) << put.ToString();
    const std::string mib = std::to_string((wal_bytes + (2 << 20) - 1) >> 20) + " MiB";
    EXPECT_NE(put.message().find("restart once " + mib + " are free"), std::string::npos)
        << put.ToString();
    EXPECT_STATUS(store->Delete(b.stored()).status(), kIOError);
    EXPECT_STATUS(store->Pin(a.stored()).status(), kIOError);
    ASSERT_OK_AND_ASSIGN(r, store->Lookup(b.stored(), false));
    EXPECT_EQ(r.keys.size(), 2u);  // the refused Delete removed nothing
    ASSERT_OK_AND_ASSIGN(r, store->Lookup(c.stored(), false));
    EXPECT_EQ(r.keys.size(), 0u);
    ASSERT_OK_AND_ASSIGN(VerifyReport v, store->VerifyAll());
    EXPECT_EQ(v.verified, 5u);
  }
  fs->full = false;
  auto store = Store::Open(o).value();
  EXPECT_FALSE(store->Stats().t1_read_only);
  EXPECT_FALSE(store->Stats().t1_writes_failing);
  ASSERT_OK(store->Put(c.Puts()));
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(b.stored(), false));
  EXPECT_EQ(r.keys.size(), 2u);
  ASSERT_OK_AND_ASSIGN(r, store->Lookup(c.stored(), false));
  EXPECT_EQ(r.keys.size(), 1u);
}

// RocksDB's read-only open takes no LOCK: a read-only T1 takes it itself, so a
// read-write open of the same directory (another server after space came back) fails
// instead of changing the database under the reads the first one serves; the lock is
// released when the read-only store closes.
TEST(StoreDisk, AReadOnlyT1HoldsItsDirectoryAgainstAWriter) {
  FullDiskStore disk;
  const StoreOptions o = disk.Options();
  const Chain a = MakeChain(TestNamespace(), 1, 2, 100);
  ASSERT_OK(Store::Open(o).value()->Put(a.Puts()));
  disk.fs->full = true;
  {
    auto reader = Store::Open(o).value();
    ASSERT_TRUE(reader->Stats().t1_read_only);
    disk.fs->full = false;
    auto writer = Store::Open(o);
    EXPECT_STATUS(writer.status(), kIOError);
    EXPECT_NE(writer.status().message().find("has this directory open"), std::string::npos)
        << writer.status().ToString();
    disk.fs->full = true;
    auto second_reader = Store::Open(o);  // a second read-only open is refused too
    EXPECT_STATUS(second_reader.status(), kIOError);
    EXPECT_NE(second_reader.status().message().find("has this directory open"), std::string::npos)
        << second_reader.status().ToString();
    ExpectStored(*reader, {{&a, 2}});
  }
  disk.fs->full = false;
  auto store = Store::Open(o).value();
  EXPECT_FALSE(store->Stats().t1_read_only);
  ExpectStored(*store, {{&a, 2}});
}

// A read-only T1 over T2: chunks demoted to Redis before the restart are served from
// Redis byte for byte and never promoted into T1 (that would evict, and write).
TEST(StoreDisk, AReadOnlyT1ServesDemotedChunksFromRedis) {
  if (!RedisInstalled()) GTEST_SKIP() << "redis-server not installed; scripts/setup.sh installs it";
  FullDiskStore disk;
  TempDir redis_dir;
  std::string error;
  auto redis = RedisServer::Start(redis_dir.path(), false, &error);
  ASSERT_TRUE(redis) << error;
  StoreOptions o = disk.Options();
  o.memory_budget_bytes = 12000;
  o.disk_budget_bytes = 30000;  // 6 of the 16 chunks: the rest are demoted to Redis
  o.redis.endpoints = {redis->endpoint()};
  const Digest256 ns = TestNamespace();
  std::vector<Chain> chains;
  {
    auto store = Store::Open(o).value();
    for (int i = 0; i < 8; ++i) {
      chains.push_back(MakeChain(ns, 300 + i, 2, 5000));
      ASSERT_OK(store->Put(chains.back().Puts()));
    }
    ASSERT_GT(store->Stats().tiers[2].entries, 0u);
  }
  disk.fs->full = true;
  auto store = Store::Open(o).value();
  ASSERT_TRUE(store->Stats().t1_read_only);
  for (const Chain& c : chains) {
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(c.stored()));
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(got[i].found);
      EXPECT_TRUE(Same(got[i].payload_bytes(), c.payloads[i]));
    }
  }
  const StoreStats s = store->Stats();
  EXPECT_GT(s.tiers[2].hits, 0u);
  EXPECT_EQ(s.tiers[1].promotions, 0u);
  EXPECT_EQ(s.tiers[1].evictions, 0u);
  EXPECT_EQ(s.tiers[1].errors, 0u);  // no T1 write was even tried
}

// A chunk key has one parent (docs/protocol.md §5.3): a Put that names another parent
// for a stored key (a cycle K1 -> K2 -> K1 included) is refused with Mismatch and
// changes nothing, in the index or in T1's meta; a re-Put under the same parent
// overwrites. Both entries survive a restart with their links.
TEST(StoreDisk, APutCannotReparentAStoredKey) {
  TempDir dir;
  const Digest256 ns = TestNamespace();
  const Chain a = MakeChain(ns, 31, 2, 3000);  // K1 <- K2
  const Chain b = MakeChain(ns, 32, 1, 3000);  // B1
  const StoredKey k1 = a.keys[0].stored(), k2 = a.keys[1].stored(), b1 = b.keys[0].stored();
  const std::vector<uint8_t> new_k2 = Bytes(77, 2500);
  {
    auto store = Store::Open(DiskOptions(dir.path())).value();
    ASSERT_OK(store->Put(a.Puts()));
    ASSERT_OK(store->Put(b.Puts()));
    auto put_one = [&](const StoredKey& key, std::optional<StoredKey> parent,
                       const std::vector<uint8_t>& payload) {
      PutChunk p;
      p.key = key;
      p.has_parent = parent.has_value();
      if (parent) p.parent = *parent;
      p.tokens = 256;
      p.payload = payload;
      return store->Put(std::span(&p, 1));
    };
    // K1 under K2: a cycle.
    Status s = put_one(k1, k2, a.payloads[0]);
    EXPECT_EQ(s.code(), Status::Code::kMismatch) << s.ToString();
    EXPECT_NE(s.message().find("is stored as the first chunk of a prefix"), std::string::npos)
        << s.ToString();
    // K2 under B1, and K2 as a root.
    s = put_one(k2, b1, a.payloads[1]);
    EXPECT_EQ(s.code(), Status::Code::kMismatch) << s.ToString();
    EXPECT_NE(s.message().find("is stored with parent " + ToHex(k1)), std::string::npos)
        << s.ToString();
    EXPECT_EQ(put_one(k2, std::nullopt, a.payloads[1]).code(), Status::Code::kMismatch);
    // In one multi-chunk Put too: nothing of it is written.
    std::vector<PutChunk> two = b.Puts();
    two.push_back(a.Puts(1, 2)[0]);
    two.back().parent = b1;
    EXPECT_EQ(store->Put(two).code(), Status::Code::kMismatch);
    // The same parent: an overwrite.
    ASSERT_OK(put_one(k2, k1, new_k2));
    EXPECT_EQ(store->Stats().put_failures, 4u);
    ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(ns, a.tokens, 256, false));
    EXPECT_EQ(r.keys.size(), 2u);
    // Deleting B1 removes B1 alone: K2 was never linked under it.
    ASSERT_OK_AND_ASSIGN(uint64_t removed, store->Delete(std::span(&b1, 1)));
    EXPECT_EQ(removed, 1u);
  }
  for (int restart = 0; restart < 2; ++restart) {
    auto store = Store::Open(DiskOptions(dir.path())).value();
    EXPECT_EQ(store->Stats().index_entries, 2u);
    ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(ns, a.tokens, 256, false));
    EXPECT_EQ(r.keys.size(), 2u);
    EXPECT_EQ(r.matched_tokens, 512u);
    const StoredKey keys[2] = {k1, k2};
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(keys));
    ASSERT_TRUE(got[0].found);
    ASSERT_TRUE(got[1].found);
    EXPECT_TRUE(Same(got[0].payload_bytes(), a.payloads[0]));
    EXPECT_TRUE(Same(got[1].payload_bytes(), new_k2));
    if (restart == 1) {
      ASSERT_OK_AND_ASSIGN(uint64_t removed, store->Delete(std::span(&k1, 1)));
      EXPECT_EQ(removed, 2u);
    }
  }
}

TEST(StoreDisk, AWriteThatFailsIsNeverVisible) {
  FullDiskStore disk;
  StoreOptions o = disk.Options();
  FullDiskFs* fs = disk.fs.get();
  const Digest256 ns = TestNamespace();
  const Chain ok1 = MakeChain(ns, 1, 2, 20000);
  const Chain lost = MakeChain(ns, 2, 3, 20000);
  const Chain ok2 = MakeChain(ns, 3, 1, 100);
  {
    auto store = Store::Open(o).value();
    ASSERT_OK(store->Put(ok1.Puts()));
    fs->full = true;
    EXPECT_STATUS(store->Put(lost.Puts()), kIOError);
    ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(lost.stored(), false));
    EXPECT_EQ(r.keys.size(), 0u);
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(lost.stored()));
    for (const ChunkData& d : got) EXPECT_FALSE(d.found);
    EXPECT_EQ(store->Stats().put_failures, 1u);
    EXPECT_TRUE(store->Stats().t1_writes_failing);  // what /healthz and /metrics report
    // Space comes back: RocksDB recovers (in the background, or through the Resume the
    // next Put asks for) and writes are accepted again.
    fs->full = false;
    Status s;
    for (int i = 0; i < 100; ++i) {
      s = store->Put(ok2.Puts());
      if (s.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_OK(s);
    EXPECT_FALSE(store->Stats().t1_writes_failing);
  }
  o.rocksdb_env = nullptr;
  auto store = Store::Open(o).value();
  ExpectStored(*store, {{&lost, 0}, {&ok1, 2}, {&ok2, 1}});
}

// The disk fills before anything is in RocksDB's memtables (the first write after an
// open), so the WAL file's own writer fails: RocksDB 7.8 keeps that file across its
// recovery and aborts the process at the next append to it (facebook/rocksdb#11643).
// Once space is back the store never appends to it: T1 reports needs_restart, Put,
// Delete and Pin fail with an IOError that says to restart, reads are served; the
// reopen finds exactly what was acknowledged and takes writes again.
TEST(StoreDisk, AWalThatFailedOnAFullDiskTakesNoWritesUntilARestart) {
  FullDiskStore disk;
  StoreOptions o = disk.Options();
  FullDiskFs* fs = disk.fs.get();
  const Digest256 ns = TestNamespace();
  const Chain a = MakeChain(ns, 1, 2, 20000);
  const Chain b = MakeChain(ns, 2, 1, 100);
  const Chain c = MakeChain(ns, 3, 1, 100);
  {
    auto store = Store::Open(o).value();
    ASSERT_OK(store->Put(a.Puts()));
    store.reset();  // a clean close: the next open starts with empty memtables
    store = Store::Open(o).value();
    fs->full = true;
    EXPECT_STATUS(store->Put(b.Puts()), kIOError);
    fs->full = false;
    // Until RocksDB's own recovery (in the background) has run, writes fail with its
    // background error; then the switch to a new WAL file fails and T1 says so.
    Status s;
    for (int i = 0; i < 400 && !store->Stats().t1_needs_restart; ++i) {
      s = store->Put(b.Puts());
      if (!store->Stats().t1_needs_restart) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_STATUS(s, kIOError);
    EXPECT_NE(s.message().find("MiB are free to accept writes"), std::string::npos) << s.ToString();
    EXPECT_STATUS(store->Delete(a.stored()).status(), kIOError);
    EXPECT_STATUS(store->Pin(a.stored()).status(), kIOError);
    const StoreStats st = store->Stats();
    EXPECT_TRUE(st.t1_needs_restart);
    EXPECT_TRUE(st.t1_writes_failing);
    EXPECT_FALSE(st.t1_read_only);
    ASSERT_OK_AND_ASSIGN(auto got, store->Get(a.stored()));
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(got[i].found);
      EXPECT_TRUE(Same(got[i].payload_bytes(), a.payloads[i]));
    }
  }
  auto store = Store::Open(o).value();
  EXPECT_FALSE(store->Stats().t1_needs_restart);
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(b.stored(), false));
  EXPECT_EQ(r.keys.size(), 0u);  // never acknowledged
  ASSERT_OK(store->Put(b.Puts()));
  ASSERT_OK(store->Put(c.Puts()));
  ASSERT_OK(store->Delete(c.stored()).status());
  ASSERT_OK(store->Pin(b.stored()).status());
  store.reset();
  o.rocksdb_env = nullptr;
  store = Store::Open(o).value();
  ExpectStored(*store, {{&a, 2}, {&b, 1}, {&c, 0}});
}

// At its disk budget on a full disk, a Put's eviction fails: the Put returns that
// IOError (the cause and the tier), not "full of pinned entries" (nothing is pinned),
// and nothing stored changes.
TEST(StoreDisk, AnEvictionThatFailsOnAFullDiskFailsThePutWithItsIOError) {
  FullDiskStore disk;
  StoreOptions o = disk.Options();
  o.memory_budget_bytes = 0;
  o.disk_budget_bytes = 50000;
  FullDiskFs* fs = disk.fs.get();
  const Digest256 ns = TestNamespace();
  const Chain a = MakeChain(ns, 1, 2, 20000);
  const Chain b = MakeChain(ns, 2, 1, 20000);
  auto store = Store::Open(o).value();
  ASSERT_OK(store->Put(a.Puts()));
  fs->full = true;
  const Status s = store->Put(b.Puts());  // needs one of a's chunks evicted
  EXPECT_STATUS(s, kIOError);
  EXPECT_NE(s.message().find("eviction from T1 failed"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("simulated full disk"), std::string::npos) << s.ToString();
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(a.stored(), false));
  EXPECT_EQ(r.keys.size(), 2u);
  ASSERT_OK_AND_ASSIGN(r, store->Lookup(b.stored(), false));
  EXPECT_EQ(r.keys.size(), 0u);
}

// Flips one byte of `needle`'s first occurrence in any file under `dir` ending in `ext`.
bool FlipByteOnDisk(const std::string& dir, const std::string& ext,
                    const std::vector<uint8_t>& needle) {
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ext) continue;
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(io)), std::istreambuf_iterator<char>());
    const size_t at = data.find(std::string(needle.begin(), needle.end()));
    if (at == std::string::npos) continue;
    const size_t off = at + needle.size() / 2;
    io.seekp(static_cast<std::streamoff>(off));
    const char c = static_cast<char>(data[off] ^ 0x40);
    io.write(&c, 1);
    return true;
  }
  return false;
}

class StoreDiskCorruption : public ::testing::TestWithParam<size_t> {};

TEST_P(StoreDiskCorruption, ACorruptedPayloadByteOnDiskIsAMiss) {
  // Param: payload size; 20000 bytes land in a blob file, 1000 inline in an SST.
  const size_t size = GetParam();
  TempDir dir;
  const Digest256 ns = TestNamespace();
  const Chain c = MakeChain(ns, 7, 3, size);
  StoreOptions o = DiskOptions(dir.path());
  o.memory_budget_bytes = 0;
  {
    auto store = Store::Open(o).value();
    ASSERT_OK(store->Put(c.Puts()));
  }
  {
    rocksdb::Options ro;
    std::vector<std::string> cfs;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(ro, dir.path(), &cfs).ok());
    EXPECT_EQ(cfs.size(), 4u);
  }
  const std::vector<uint8_t> needle(c.payloads[2].begin() + 100, c.payloads[2].begin() + 164);
  ASSERT_TRUE(FlipByteOnDisk(dir.path(), size >= 4096 ? ".blob" : ".sst", needle))
      << "payload bytes not found on disk";
  auto store = Store::Open(o).value();
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(c.stored()));
  EXPECT_FALSE(got[2].found);
  uint64_t misses = 0;
  for (size_t i = 0; i < 3; ++i) {
    if (got[i].found) EXPECT_TRUE(Same(got[i].payload_bytes(), c.payloads[i]));
    else ++misses;
  }
  if (size >= 4096) EXPECT_EQ(misses, 1u);  // blob records are checked one by one
  // Inline values share a data block: RocksDB's block checksum may fail them together.
  EXPECT_EQ(store->Stats().checksum_failures, misses);
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(c.stored(), false));
  size_t lead = 0;
  while (lead < 3 && got[lead].found) ++lead;
  EXPECT_EQ(r.keys.size(), lead);  // the bad entries (and their descendants) were dropped
}

INSTANTIATE_TEST_SUITE_P(BlobAndInline, StoreDiskCorruption, ::testing::Values(20000, 1000));

TEST(StoreDisk, AnotherKeysBytesUnderAKeyAreRefused) {
  // RocksDB's own checksums hold, but the payload stored under key 1 is key 0's: only
  // the store's XXH3 in the meta record can tell.
  TempDir dir;
  const Digest256 ns = TestNamespace();
  const Chain c = MakeChain(ns, 8, 2, 5000);
  StoreOptions o = DiskOptions(dir.path());
  o.memory_budget_bytes = 0;
  { ASSERT_OK(Store::Open(o).value()->Put(c.Puts())); }
  {
    RocksTierOptions ro;
    ro.path = dir.path();
    auto t1 = RocksTier::Open(ro).value();
    auto values = t1->Read(c.stored()).value();
    RocksTier::Batch b = t1->NewBatch();
    const auto& p0 = values[0].payload;
    b.PutChunk(c.keys[1].stored(), values[1].meta,
               {reinterpret_cast<const uint8_t*>(p0.data()), p0.size()}, {});
    ASSERT_OK(t1->Write(b));
  }
  auto store = Store::Open(o).value();
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(c.stored()));
  EXPECT_TRUE(got[0].found);
  EXPECT_FALSE(got[1].found);
  EXPECT_EQ(store->Stats().checksum_failures, 1u);
}

TEST(StoreDisk, AFirstOpenLogsNoError) {
  // RocksDB logged "Error when reading <path> dir NotFound" on every first open.
  TempDir dir;
  auto lines = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  lines->set_level(spdlog::level::warn);
  Logger().sinks().push_back(lines);
  {
    RocksTierOptions ro;
    ro.path = dir.path() + "/t1";
    ASSERT_OK(RocksTier::Open(ro).status());
  }
  // A missing parent: a clear error, still no RocksDB error line.
  RocksTierOptions orphan;
  orphan.path = dir.path() + "/no/such/parent/t1";
  const Status s = RocksTier::Open(orphan).status();
  Logger().sinks().pop_back();
  EXPECT_EQ(lines->last_formatted(), std::vector<std::string>{});
  EXPECT_STATUS(s, kIOError);
  EXPECT_NE(s.message().find("whose parent folder exists"), std::string::npos) << s.message();
  // A file where the folder should be: the message says it must be a folder.
  RocksTierOptions file;
  file.path = dir.path() + "/a-file";
  std::ofstream(file.path) << "x";
  const Status f = RocksTier::Open(file).status();
  EXPECT_STATUS(f, kIOError);
  EXPECT_NE(f.message().find("it must be a folder"), std::string::npos) << f.message();
}

TEST(StoreDisk, SnapshotReadReturnsOldBytesAfterDelete) {
  TempDir dir;
  RocksTierOptions ro;
  ro.path = dir.path();
  ro.blob_min_bytes = 1024;
  auto t1 = RocksTier::Open(ro).value();
  const Chain c = MakeChain(TestNamespace(), 9, 1, 50000);
  const StoredKey k = c.keys[0].stored();
  RocksTier::Batch b = t1->NewBatch();
  b.PutChunk(k, "meta", c.payloads[0], {});
  ASSERT_OK(t1->Write(b));
  auto snap = t1->TakeSnapshot();
  RocksTier::Batch del = t1->NewBatch();
  del.DeleteChunk(k);
  ASSERT_OK(t1->Write(del));
  ASSERT_OK_AND_ASSIGN(auto now, t1->Read(std::span(&k, 1)));
  EXPECT_FALSE(now[0].found);
  ASSERT_OK_AND_ASSIGN(auto old, t1->Read(std::span(&k, 1), snap.get()));
  ASSERT_TRUE(old[0].found);
  EXPECT_EQ(old[0].payload, std::string(c.payloads[0].begin(), c.payloads[0].end()));
}

TEST(StoreDisk, HitsPromoteToMemoryAndMemoryEvictionKeepsTheDiskCopy) {
  TempDir dir;
  StoreOptions o = DiskOptions(dir.path());
  o.memory_budget_bytes = 25000;
  auto store = Store::Open(o).value();
  const Digest256 ns = TestNamespace();
  const Chain a = MakeChain(ns, 1, 2, 10000);
  const Chain b = MakeChain(ns, 2, 2, 10000);
  ASSERT_OK(store->Put(a.Puts()));
  ASSERT_OK(store->Put(b.Puts()));  // T0 holds 2 chunks: A leaves memory (to T1 only)
  ASSERT_OK_AND_ASSIGN(LookupResult r, store->Lookup(a.stored(), false));
  ASSERT_EQ(r.keys.size(), 2u);
  EXPECT_EQ(r.tiers[1], Tier::kDisk);
  ASSERT_OK_AND_ASSIGN(auto got, store->Get(a.stored()));
  EXPECT_EQ(got[1].tier, Tier::kDisk);
  EXPECT_TRUE(Same(got[1].payload_bytes(), a.payloads[1]));
  ASSERT_OK_AND_ASSIGN(got, store->Get(a.stored()));  // promoted by the first Get
  EXPECT_EQ(got[0].tier, Tier::kMemory);
  EXPECT_EQ(got[1].tier, Tier::kMemory);
  const StoreStats s = store->Stats();
  EXPECT_GE(s.tiers[0].promotions, 2u);
  EXPECT_GE(s.tiers[0].evictions, 2u);
  EXPECT_EQ(s.tiers[1].entries, 4u);
  EXPECT_LE(s.tiers[0].bytes, 25000u);
}

TEST(StoreDisk, ReadersRacingEvictionSeeWholeBytesOrAMiss) {
  TempDir dir;
  StoreOptions o = DiskOptions(dir.path());
  o.memory_budget_bytes = 0;
  o.disk_budget_bytes = 200000;
  auto store = Store::Open(o).value();
  const Digest256 ns = TestNamespace();
  const Chain hot = MakeChain(ns, 1, 2, 30000);
  ASSERT_OK(store->Put(hot.Puts()));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, found{0}, bad{0};
  std::thread reader([&] {
    while (!stop) {
      auto got = store->Get(hot.stored());
      if (!got.ok()) {
        ++bad;
        continue;
      }
      for (size_t i = 0; i < 2; ++i) {
        if (!(*got)[i].found) continue;
        ++found;
        if (!Same((*got)[i].payload_bytes(), hot.payloads[i])) ++bad;
      }
      ++reads;
    }
  });
  // At least 150 Puts, and on until the reader has read 50 times.
  for (int i = 0; i < 150 || reads < 50; ++i) {
    ASSERT_OK(store->Put(MakeChain(ns, 100 + i, 1, 30000).Puts()));  // evicts constantly
    if (i % 10 == 0) ASSERT_OK(store->Put(hot.Puts()));
  }
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  EXPECT_GT(store->Stats().tiers[1].evictions, 100u);
}

}  // namespace
}  // namespace kvstash::store::testing
