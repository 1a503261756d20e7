// Store::Impl readers: Get and VerifyAll (store/store.h).
#include "common/checksum.h"
#include "common/logging.h"
#include "store/store_impl.h"

namespace kvstash::store {
namespace {

bool Matches(const SharedBytes& b, uint64_t size, uint64_t checksum) {
  if (!b) return size == 0;
  return b->size() == size && Xxh3_64(*b) == checksum;
}

bool Matches(const std::string& b, uint64_t size, uint64_t checksum) {
  return b.size() == size && Xxh3_64(b) == checksum;
}

SharedBytes Share(std::string&& s) { return std::make_shared<const std::string>(std::move(s)); }

// Checks a T1 value against its own meta record (read under the same snapshot).
Result<MetaRecord> CheckDiskValue(const RocksTier::Value& v) {
  KVSTASH_ASSIGN_OR_RETURN(
      MetaRecord m,
      DecodeMetaRecord({reinterpret_cast<const uint8_t*>(v.meta.data()), v.meta.size()}));
  if (!Matches(v.payload, m.payload_bytes, m.payload_checksum)) {
    return Status::Corruption("T1 payload fails its checksum");
  }
  if ((m.flags & kMetaHasState) && !Matches(v.state, m.state_bytes, m.state_checksum)) {
    return Status::Corruption("T1 state record fails its checksum");
  }
  return m;
}

}  // namespace

Result<std::vector<ChunkData>> Store::Impl::Get(std::span<const StoredKey> keys) {
  const size_t n = keys.size();
  std::vector<ChunkData> out(n);
  struct Plan {
    uint32_t id = kNoEntry;
    uint8_t flags = 0;
    uint64_t payload_bytes = 0, state_bytes = 0, pck = 0, sck = 0;
    uint32_t tokens = 0;
    uint16_t codec = 0;
    std::shared_ptr<const MemoryRecord> rec;
  };
  std::vector<Plan> plan(n);
  {
    ReaderLock lock(index_mu_);
    for (size_t i = 0; i < n; ++i) {
      out[i].key = keys[i];
      Plan& p = plan[i];
      p.id = index_.Find(keys[i]);
      if (p.id == kNoEntry) continue;
      const IndexEntry& e = index_.at(p.id);
      p.flags = e.flags;
      p.payload_bytes = e.payload_bytes;
      p.state_bytes = e.state_bytes;
      p.pck = e.payload_checksum;
      p.sck = e.state_checksum;
      p.tokens = e.tokens;
      p.codec = e.codec;
      p.rec = e.t0;
    }
  }
  std::vector<size_t> want_t1, want_t2;
  std::vector<StoredKey> drop, drop_remote;
  std::vector<std::pair<size_t, RedisTier::Item>> from_remote;
  uint64_t corrupt = 0;
  auto bad = [&](size_t i) {
    ++corrupt;
    out[i].corrupt = true;
    if (plan[i].id != kNoEntry) drop.push_back(keys[i]);
    else drop_remote.push_back(keys[i]);
  };

  for (size_t i = 0; i < n; ++i) {
    const Plan& p = plan[i];
    if (p.rec) {
      if (Matches(p.rec->payload, p.payload_bytes, p.pck) &&
          (!(p.flags & kHasState) || Matches(p.rec->state, p.state_bytes, p.sck))) {
        ChunkData& d = out[i];
        d.found = true;
        d.tier = Tier::kMemory;
        d.tokens = p.tokens;
        d.partial = p.flags & kPartial;
        d.codec = p.codec;
        d.payload = p.rec->payload;
        if (p.flags & kHasState) d.state = p.rec->state;
      } else {
        bad(i);
      }
    } else if (p.id != kNoEntry && (p.flags & kInT1) && t1_) {
      want_t1.push_back(i);
    } else if (t2_ && (p.id == kNoEntry || (p.flags & kInT2))) {
      want_t2.push_back(i);
    }
  }

  if (!want_t1.empty()) {
    std::vector<StoredKey> k1;
    k1.reserve(want_t1.size());
    for (size_t i : want_t1) k1.push_back(keys[i]);
    auto values = t1_->Read(k1);
    if (!values.ok()) {
      c_.errors[1]++;
      return values.status();
    }
    for (size_t j = 0; j < want_t1.size(); ++j) {
      const size_t i = want_t1[j];
      RocksTier::Value& v = (*values)[j];
      if (v.corrupt) {
        KVSTASH_LOG_WARN("store: chunk {}: RocksDB reports corruption", ToHex(keys[i]));
        bad(i);
        continue;
      }
      if (!v.found) {  // evicted or deleted after planning: a miss, or T2 has it now
        if (t2_) want_t2.push_back(i);
        continue;
      }
      auto m = CheckDiskValue(v);
      if (m.ok() && (m->payload_checksum != plan[i].pck || m->state_checksum != plan[i].sck)) {
        m = Status::Corruption("T1 record differs from the indexed one");
      }
      if (!m.ok()) {
        KVSTASH_LOG_WARN("store: chunk {}: {}", ToHex(keys[i]), m.status().ToString());
        bad(i);
        continue;
      }
      ChunkData& d = out[i];
      d.found = true;
      d.tier = Tier::kDisk;
      d.tokens = m->tokens;
      d.partial = m->flags & kMetaPartial;
      d.codec = m->codec;
      d.payload = Share(std::move(v.payload));
      if (m->flags & kMetaHasState) d.state = Share(std::move(v.state));
    }
  }

  if (!want_t2.empty()) {
    std::vector<StoredKey> k2;
    k2.reserve(want_t2.size());
    for (size_t i : want_t2) k2.push_back(keys[i]);
    auto items = t2_->Get(k2);
    for (size_t j = 0; j < want_t2.size(); ++j) {
      const size_t i = want_t2[j];
      auto& r = items[j];
      if (!r.ok()) {
        if (r.status().IsCorruption()) {
          KVSTASH_LOG_WARN("store: chunk {}: {}", ToHex(keys[i]), r.status().ToString());
          bad(i);
        } else {
          c_.errors[2]++;
        }
        continue;
      }
      if (!r->has_value()) {
        // The shared pool lost it (Redis eviction, another node's delete): forget it
        // unless a local copy remains.
        if (plan[i].id != kNoEntry && !(plan[i].flags & (kInT0 | kInT1))) {
          drop.push_back(keys[i]);
        }
        continue;
      }
      RedisTier::Item& item = **r;
      if (plan[i].id != kNoEntry && (item.meta.payload_checksum != plan[i].pck ||
                                     item.meta.state_checksum != plan[i].sck)) {
        // Another version than the one indexed when this Get planned (an older copy
        // Redis kept after an overwrite, or a newer one demoted since): never served,
        // a miss. Not deleted here: without the writer lock it may be the current one.
        continue;
      }
      ChunkData& d = out[i];
      d.found = true;
      d.tier = Tier::kRemote;
      d.tokens = item.meta.tokens;
      d.partial = item.meta.flags & kMetaPartial;
      d.codec = item.meta.codec;
      d.payload = item.payload;
      d.state = item.state;
      from_remote.emplace_back(i, std::move(item));
    }
  }

  c_.checksum_failures += corrupt;
  if (!drop.empty()) DropKeys(drop);
  if (!drop_remote.empty()) {
    for (const Status& s : t2_->Delete(drop_remote)) {
      if (!s.ok()) c_.errors[2]++;
    }
  }

  uint64_t misses = 0;
  {
    const uint32_t now_s = static_cast<uint32_t>(NowMs() / 1000);
    WriterLock lock(index_mu_);
    for (size_t i = 0; i < n; ++i) {
      if (!out[i].found) {
        ++misses;
        continue;
      }
      c_.hits[static_cast<int>(out[i].tier)]++;
      const uint32_t id = plan[i].id;
      if (id == kNoEntry || !index_.at(id).live() || index_.at(id).key != keys[i]) continue;
      index_.Touch(id);
      index_.at(id).access_s = now_s;
    }
  }
  c_.gets += n;
  c_.get_misses += misses;

  // Promotions are best effort: skipped when another writer holds the store.
  if (write_mu_.TryLock()) {
    MutexLock wl(write_mu_, std::adopt_lock);
    for (auto& [i, item] : from_remote) PromoteFromRemote(item);
    if (on_[0]) {
      for (size_t i = 0; i < n; ++i) {
        if (!out[i].found || out[i].tier == Tier::kMemory) continue;
        uint32_t id;
        {
          ReaderLock lock(index_mu_);
          id = index_.Find(keys[i]);
        }
        if (id != kNoEntry) PromoteToMemory(id, out[i].payload, out[i].state);
      }
    }
  }
  return out;
}

Result<VerifyReport> Store::Impl::VerifyAll() {
  MutexLock wl(write_mu_);
  VerifyReport report;
  std::vector<uint32_t> bad_ids;
  std::vector<uint32_t> disk_ids;
  std::vector<StoredKey> disk_keys;
  {
    ReaderLock lock(index_mu_);
    index_.ForEach([&](uint32_t id) KVSTASH_REQUIRES_SHARED(index_mu_) {
      const IndexEntry& e = index_.at(id);
      if (e.t0) {
        ++report.entries;
        const bool ok = Matches(e.t0->payload, e.payload_bytes, e.payload_checksum) &&
                        (!(e.flags & kHasState) ||
                         Matches(e.t0->state, e.state_bytes, e.state_checksum));
        if (!ok) {
          bad_ids.push_back(id);
          return;
        }
        if (!(e.flags & kInT1)) ++report.verified;
      }
      if (e.flags & kInT1) {
        if (!e.t0) ++report.entries;
        disk_ids.push_back(id);
        disk_keys.push_back(e.key);
      }
    });
  }
  constexpr size_t kBatch = 64;
  for (size_t b = 0; b < disk_keys.size(); b += kBatch) {
    const size_t m = std::min(kBatch, disk_keys.size() - b);
    KVSTASH_ASSIGN_OR_RETURN(auto values,
                             t1_->Read(std::span(disk_keys).subspan(b, m)));
    for (size_t j = 0; j < m; ++j) {
      bool ok = false;
      if (values[j].found && !values[j].corrupt) {
        auto meta = CheckDiskValue(values[j]);
        ReaderLock lock(index_mu_);
        const IndexEntry& e = index_.at(disk_ids[b + j]);
        ok = meta.ok() && meta->payload_checksum == e.payload_checksum &&
             meta->state_checksum == e.state_checksum;
      }
      if (ok) ++report.verified;
      else bad_ids.push_back(disk_ids[b + j]);
    }
  }
  report.dropped = bad_ids.size();
  c_.checksum_failures += bad_ids.size();
  if (!bad_ids.empty()) {
    KVSTASH_LOG_WARN("store: verify dropped {} chunks that failed their checksums",
                     bad_ids.size());
    KVSTASH_RETURN_IF_ERROR(RemoveSubtrees(bad_ids).status());
  }
  return report;
}

}  // namespace kvstash::store
