// Store::Impl readers: Get and VerifyAll (store/store.h).
#include "common/checksum.h"
#include "common/logging.h"
#include "store/store_impl.h"

namespace kvstash::store {
namespace {

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

void GetState::Corrupt(size_t i) {
  ++corrupt;
  out[i].corrupt = true;
  if (plan[i].id != kNoEntry) drop.push_back(keys[i]);
  else drop_remote.push_back(keys[i]);
}

Result<std::vector<ChunkData>> Store::Impl::Get(std::span<const StoredKey> keys) {
  GetState g = PlanGet(keys);
  ReadT0(&g);
  KVSTASH_RETURN_IF_ERROR(ReadT1(&g));
  ReadT2(&g);
  AccountGet(&g);
  PromoteGetHits(&g);
  return std::move(g.out);
}

GetState Store::Impl::PlanGet(std::span<const StoredKey> keys) {
  GetState g;
  g.keys = keys;
  g.plan.resize(keys.size());
  g.out.resize(keys.size());
  ReaderLock lock(index_mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    g.out[i].key = keys[i];
    GetPlan& p = g.plan[i];
    p.id = index_.Find(keys[i]);
    if (p.id == kNoEntry) continue;
    const IndexEntry& e = index_.at(p.id);
    p.flags = e.flags;
    p.payload_bytes = e.payload_bytes;
    p.state_bytes = e.state_bytes;
    p.payload_checksum = e.payload_checksum;
    p.state_checksum = e.state_checksum;
    p.tokens = e.tokens;
    p.codec = e.codec;
    p.t0 = e.t0;
  }
  return g;
}

void Store::Impl::ReadT0(GetState* g) {
  for (size_t i = 0; i < g->keys.size(); ++i) {
    const GetPlan& p = g->plan[i];
    if (p.t0) {
      if (Matches(p.t0->payload, p.payload_bytes, p.payload_checksum) &&
          (!(p.flags & kHasState) || Matches(p.t0->state, p.state_bytes, p.state_checksum))) {
        ChunkData& d = g->out[i];
        d.found = true;
        d.tier = Tier::kMemory;
        d.tokens = p.tokens;
        d.partial = p.flags & kPartial;
        d.codec = p.codec;
        d.payload = p.t0->payload;
        if (p.flags & kHasState) d.state = p.t0->state;
      } else {
        g->Corrupt(i);
      }
    } else if (p.id != kNoEntry && (p.flags & kInT1) && t1_) {
      g->want_t1.push_back(i);
    } else if (t2_ && (p.id == kNoEntry || (p.flags & kInT2))) {
      g->want_t2.push_back(i);
    }
  }
}

Status Store::Impl::ReadT1(GetState* g) {
  if (g->want_t1.empty()) return Status::Ok();
  std::vector<StoredKey> k1;
  k1.reserve(g->want_t1.size());
  for (size_t i : g->want_t1) k1.push_back(g->keys[i]);
  auto values = t1_->Read(k1);
  if (!values.ok()) {
    c_.errors[Tier::kDisk]++;
    return values.status();
  }
  for (size_t j = 0; j < g->want_t1.size(); ++j) {
    const size_t i = g->want_t1[j];
    RocksTier::Value& v = (*values)[j];
    if (v.corrupt) {
      KVSTASH_LOG_WARN("store: chunk {}: RocksDB reports corruption", ToHex(g->keys[i]));
      g->Corrupt(i);
      continue;
    }
    if (!v.found) {  // evicted or deleted after planning: a miss, or T2 has it now
      if (t2_) g->want_t2.push_back(i);
      continue;
    }
    auto m = CheckDiskValue(v);
    if (m.ok() && (m->payload_checksum != g->plan[i].payload_checksum ||
                   m->state_checksum != g->plan[i].state_checksum)) {
      m = Status::Corruption("T1 record differs from the indexed one");
    }
    if (!m.ok()) {
      KVSTASH_LOG_WARN("store: chunk {}: {}", ToHex(g->keys[i]), m.status().ToString());
      g->Corrupt(i);
      continue;
    }
    ChunkData& d = g->out[i];
    d.found = true;
    d.tier = Tier::kDisk;
    d.tokens = m->tokens;
    d.partial = m->flags & kMetaPartial;
    d.codec = m->codec;
    d.payload = Share(std::move(v.payload));
    if (m->flags & kMetaHasState) d.state = Share(std::move(v.state));
  }
  return Status::Ok();
}

void Store::Impl::ReadT2(GetState* g) {
  if (g->want_t2.empty()) return;
  std::vector<StoredKey> k2;
  k2.reserve(g->want_t2.size());
  for (size_t i : g->want_t2) k2.push_back(g->keys[i]);
  auto items = t2_->Get(k2);
  for (size_t j = 0; j < g->want_t2.size(); ++j) {
    const size_t i = g->want_t2[j];
    const GetPlan& p = g->plan[i];
    auto& r = items[j];
    if (!r.ok()) {
      if (r.status().IsCorruption()) {
        KVSTASH_LOG_WARN("store: chunk {}: {}", ToHex(g->keys[i]), r.status().ToString());
        g->Corrupt(i);
      } else {
        c_.errors[Tier::kRemote]++;
      }
      continue;
    }
    if (!r->has_value()) {
      // The shared pool lost it (Redis eviction, another node's delete): forget it
      // unless a local copy remains.
      if (p.id != kNoEntry && !(p.flags & (kInT0 | kInT1))) g->drop.push_back(g->keys[i]);
      continue;
    }
    RedisTier::Item& item = **r;
    if (p.id != kNoEntry &&
        (item.meta.payload_checksum != p.payload_checksum || item.meta.state_checksum != p.state_checksum)) {
      // Another version than the one indexed when this Get planned (an older copy
      // Redis kept after an overwrite, or a newer one demoted since): never served,
      // a miss. Not deleted here: without the writer lock it may be the current one.
      continue;
    }
    ChunkData& d = g->out[i];
    d.found = true;
    d.tier = Tier::kRemote;
    d.tokens = item.meta.tokens;
    d.partial = item.meta.flags & kMetaPartial;
    d.codec = item.meta.codec;
    d.payload = item.payload;
    d.state = item.state;
    g->from_remote.emplace_back(i, std::move(item));
  }
}

void Store::Impl::AccountGet(GetState* g) {
  c_.checksum_failures += g->corrupt;
  if (!g->drop.empty()) DropKeys(g->drop);
  if (!g->drop_remote.empty()) {
    for (const Status& s : t2_->Delete(g->drop_remote)) {
      if (!s.ok()) c_.errors[Tier::kRemote]++;
    }
  }
  uint64_t misses = 0;
  {
    const uint32_t now_s = static_cast<uint32_t>(NowMs() / 1000);
    WriterLock lock(index_mu_);
    for (size_t i = 0; i < g->keys.size(); ++i) {
      const ChunkData& d = g->out[i];
      if (!d.found) {
        ++misses;
        continue;
      }
      c_.hits[d.tier]++;
      const uint32_t id = g->plan[i].id;
      if (id == kNoEntry || !index_.at(id).live() || index_.at(id).key != g->keys[i]) continue;
      index_.Touch(id);
      index_.at(id).access_s = now_s;
    }
  }
  c_.gets += g->keys.size();
  c_.get_misses += misses;
}

void Store::Impl::PromoteGetHits(GetState* g) {
  if (!write_mu_.TryLock()) return;
  MutexLock wl(write_mu_, std::adopt_lock);
  for (auto& [i, item] : g->from_remote) PromoteFromRemote(item);
  if (!on_[Tier::kMemory]) return;
  for (size_t i = 0; i < g->keys.size(); ++i) {
    const ChunkData& d = g->out[i];
    if (!d.found || d.tier == Tier::kMemory) continue;
    uint32_t id;
    {
      ReaderLock lock(index_mu_);
      id = index_.Find(g->keys[i]);
    }
    if (id != kNoEntry) PromoteToMemory(id, d.payload, d.state);
  }
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
