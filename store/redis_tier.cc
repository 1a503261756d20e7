#include "store/redis_tier.h"

#include <chrono>

#include "common/checksum.h"
#include "common/logging.h"

namespace kvstash::store {
namespace {

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

Status ReplyError(const RedisReply& r) {
  return Status::Unavailable("Redis error reply: " + r.str);
}

}  // namespace

Result<std::unique_ptr<RedisTier>> RedisTier::Open(const RedisOptions& o) {
  RedisRouterOptions ro;
  ro.endpoints = o.endpoints;
  ro.connect_timeout_ms = o.connect_timeout_ms;
  ro.command_timeout_ms = o.command_timeout_ms;
  ro.max_redirects = o.max_redirects;
  auto router = RedisRouter::Connect(ro);
  if (!router.ok() && router.status().code() != Status::Code::kUnavailable) return router.status();
  if (!router.ok()) {
    KVSTASH_LOG_WARN("T2 (Redis) is down at start-up: {}; serving without it and retrying "
                     "in the background", router.status().ToString());
    return std::unique_ptr<RedisTier>(new RedisTier(o.key_prefix, ro, nullptr));
  }
  return std::unique_ptr<RedisTier>(
      new RedisTier(o.key_prefix, ro, std::shared_ptr<RedisRouter>(std::move(router).value())));
}

RedisTier::RedisTier(std::string prefix, RedisRouterOptions options,
                     std::shared_ptr<RedisRouter> router)
    : prefix_(std::move(prefix)), options_(std::move(options)), router_(std::move(router)) {
  up_ = router_ != nullptr;
  if (!router_) reconnect_ = std::thread([this] { Reconnect(); });
}

RedisTier::~RedisTier() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (reconnect_.joinable()) reconnect_.join();
}

void RedisTier::Reconnect() {
  constexpr std::chrono::milliseconds kFirst{250}, kMax{30000};
  std::chrono::milliseconds wait = kFirst;
  MutexLock lock(mu_);
  while (!stop_) {
    if (stop_cv_.wait_for(lock.native(), wait, [this]() KVSTASH_REQUIRES(mu_) { return stop_; })) {
      return;
    }
    lock.Unlock();
    auto router = RedisRouter::Connect(options_);
    lock.Lock();
    if (router.ok()) {
      router_ = std::move(router).value();
      up_ = true;
      KVSTASH_LOG_INFO("T2 (Redis) connected");
      return;
    }
    KVSTASH_LOG_DEBUG("T2 (Redis) still down: {}", router.status().ToString());
    wait = std::min(kMax, wait * 2);
  }
}

std::shared_ptr<RedisRouter> RedisTier::Router() const {
  MutexLock lock(mu_);
  return router_;
}

std::vector<Result<RedisReply>> RedisTier::Execute(std::span<const RedisCommand> commands) {
  std::shared_ptr<RedisRouter> router = Router();
  if (!router) {
    return std::vector<Result<RedisReply>>(
        commands.size(), Status::Unavailable("T2 (Redis) is down (reconnecting)"));
  }
  auto replies = router->Execute(commands);
  bool reached = replies.empty();
  for (const auto& r : replies) reached |= r.ok() || r.status().code() != Status::Code::kUnavailable;
  up_.store(reached, std::memory_order_relaxed);
  return replies;
}

std::string RedisTier::RedisKey(const StoredKey& key) const { return prefix_ + ToHex(key); }

std::vector<Status> RedisTier::Put(std::span<const Item> items) {
  std::vector<RedisCommand> cmds;
  cmds.reserve(items.size());
  for (const Item& it : items) {
    RedisCommand c;
    c.key = RedisKey(it.key);
    c.argv = {"HSET", c.key, "m", EncodeMetaRecord(it.meta), "p", *it.payload};
    if (it.state) {
      c.argv.push_back("s");
      c.argv.push_back(*it.state);
    }
    cmds.push_back(std::move(c));
  }
  std::vector<Status> out;
  out.reserve(items.size());
  for (auto& r : Execute(cmds)) {
    if (!r.ok()) out.push_back(r.status());
    else if (r->type == RedisReply::Type::kError) out.push_back(ReplyError(*r));
    else out.push_back(Status::Ok());
  }
  return out;
}

std::vector<Result<std::optional<RedisTier::Item>>> RedisTier::Get(
    std::span<const StoredKey> keys) {
  std::vector<RedisCommand> cmds;
  cmds.reserve(keys.size());
  for (const StoredKey& k : keys) {
    RedisCommand c;
    c.key = RedisKey(k);
    c.argv = {"HMGET", c.key, "m", "p", "s"};
    cmds.push_back(std::move(c));
  }
  std::vector<Result<std::optional<Item>>> out;
  out.reserve(keys.size());
  auto replies = Execute(cmds);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto& r = replies[i];
    if (!r.ok()) {
      out.push_back(r.status());
      continue;
    }
    if (r->type == RedisReply::Type::kError) {
      out.push_back(ReplyError(*r));
      continue;
    }
    if (r->type != RedisReply::Type::kArray || r->elements.size() != 3) {
      out.push_back(Status::Corruption("Redis HMGET reply of unexpected shape"));
      continue;
    }
    auto& f = r->elements;
    if (f[0].type == RedisReply::Type::kNil) {
      out.push_back(std::optional<Item>());
      continue;
    }
    if (f[0].type != RedisReply::Type::kString || f[1].type != RedisReply::Type::kString) {
      out.push_back(Status::Corruption("Redis chunk record without meta or payload"));
      continue;
    }
    auto meta = DecodeMetaRecord(AsBytes(f[0].str));
    if (!meta.ok()) {
      out.push_back(meta.status().WithContext("Redis chunk record"));
      continue;
    }
    const bool has_state = meta->flags & kMetaHasState;
    if (f[1].str.size() != meta->payload_bytes || Xxh3_64(f[1].str) != meta->payload_checksum) {
      out.push_back(Status::Corruption("Redis payload fails its checksum"));
      continue;
    }
    if (has_state && (f[2].type != RedisReply::Type::kString ||
                      f[2].str.size() != meta->state_bytes ||
                      Xxh3_64(f[2].str) != meta->state_checksum)) {
      out.push_back(Status::Corruption("Redis state record fails its checksum"));
      continue;
    }
    Item item;
    item.key = keys[i];
    item.meta = *meta;
    item.payload = std::make_shared<const std::string>(std::move(f[1].str));
    if (has_state) item.state = std::make_shared<const std::string>(std::move(f[2].str));
    out.push_back(std::optional<Item>(std::move(item)));
  }
  return out;
}

std::vector<Result<std::optional<MetaRecord>>> RedisTier::GetMeta(
    std::span<const StoredKey> keys) {
  std::vector<RedisCommand> cmds;
  cmds.reserve(keys.size());
  for (const StoredKey& k : keys) {
    RedisCommand c;
    c.key = RedisKey(k);
    c.argv = {"HGET", c.key, "m"};
    cmds.push_back(std::move(c));
  }
  std::vector<Result<std::optional<MetaRecord>>> out;
  out.reserve(keys.size());
  for (auto& r : Execute(cmds)) {
    if (!r.ok()) {
      out.push_back(r.status());
    } else if (r->type == RedisReply::Type::kNil) {
      out.push_back(std::optional<MetaRecord>());
    } else if (r->type != RedisReply::Type::kString) {
      out.push_back(r->type == RedisReply::Type::kError
                        ? ReplyError(*r)
                        : Status::Corruption("Redis meta field is not a string"));
    } else {
      auto meta = DecodeMetaRecord(AsBytes(r->str));
      if (meta.ok()) out.push_back(std::optional<MetaRecord>(*meta));
      else out.push_back(meta.status());
    }
  }
  return out;
}

std::vector<Status> RedisTier::Delete(std::span<const StoredKey> keys) {
  std::vector<RedisCommand> cmds;
  cmds.reserve(keys.size());
  for (const StoredKey& k : keys) {
    RedisCommand c;
    c.key = RedisKey(k);
    c.argv = {"DEL", c.key};
    cmds.push_back(std::move(c));
  }
  std::vector<Status> out;
  for (auto& r : Execute(cmds)) {
    if (!r.ok()) out.push_back(r.status());
    else if (r->type == RedisReply::Type::kError) out.push_back(ReplyError(*r));
    else out.push_back(Status::Ok());
  }
  return out;
}

}  // namespace kvstash::store
