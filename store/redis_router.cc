#include "store/redis_router.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <chrono>
#include <thread>

#include "store/redis_slot.h"

namespace kvstash::store {
namespace {

timeval Millis(int ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

RedisReply Convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(Convert(r->element[i]));
      break;
    default:
      out.type = RedisReply::Type::kNil;
  }
  return out;
}

// Parses "MOVED 3999 127.0.0.1:6381" / "ASK 3999 127.0.0.1:6381".
bool ParseRedirect(const std::string& err, std::string_view word, std::string* host, int* port) {
  if (err.compare(0, word.size(), word) != 0 || err.size() <= word.size() ||
      err[word.size()] != ' ') {
    return false;
  }
  const size_t sp = err.find(' ', word.size() + 1);
  if (sp == std::string::npos) return false;
  return ParseEndpoint(err.substr(sp + 1), host, port).ok();
}

}  // namespace

Status ParseEndpoint(const std::string& endpoint, std::string* host, int* port) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon + 1 >= endpoint.size()) {
    return Status::InvalidArgument("Redis endpoint '" + endpoint + "' is not host:port");
  }
  int p = 0;
  const char* b = endpoint.data() + colon + 1;
  const char* e = endpoint.data() + endpoint.size();
  auto [ptr, ec] = std::from_chars(b, e, p);
  if (ec != std::errc() || ptr != e || p <= 0 || p > 65535) {
    return Status::InvalidArgument("Redis endpoint '" + endpoint + "' has a bad port");
  }
  *host = endpoint.substr(0, colon);
  *port = p;
  return Status::Ok();
}

Result<std::unique_ptr<RedisRouter>> RedisRouter::Connect(const RedisRouterOptions& options) {
  if (options.endpoints.empty()) return Status::InvalidArgument("no Redis endpoints");
  std::unique_ptr<RedisRouter> r(new RedisRouter(options));
  // Not shared yet: uncontended, held so that the helpers' REQUIRES(mu_) hold.
  MutexLock lock(r->mu_);
  r->slots_.fill(-1);
  for (const std::string& ep : options.endpoints) {
    std::string host;
    int port = 0;
    KVSTASH_RETURN_IF_ERROR(ParseEndpoint(ep, &host, &port));
    r->NodeFor(host, port);
  }
  Status last = Status::Unavailable("no Redis endpoint answered");
  const size_t seeds = r->nodes_.size();
  for (size_t i = 0; i < seeds; ++i) {
    Status s = r->EnsureConnected(r->nodes_[i]);
    if (s.ok()) s = r->LoadSlots(static_cast<int>(i));
    if (s.ok()) return r;
    if (s.IsCorruption()) return s;
    last = s;
  }
  return last;
}

RedisRouter::~RedisRouter() {
  for (Node& n : nodes_) Disconnect(n);
}

size_t RedisRouter::node_count() const {
  MutexLock lock(mu_);
  return nodes_.size();
}

uint64_t RedisRouter::redirects() const {
  MutexLock lock(mu_);
  return redirects_;
}

int RedisRouter::NodeFor(const std::string& host, int port) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].host == host && nodes_[i].port == port) return static_cast<int>(i);
  }
  nodes_.push_back(Node{host, port, nullptr});
  return static_cast<int>(nodes_.size() - 1);
}

void RedisRouter::Disconnect(Node& node) {
  if (node.ctx != nullptr) redisFree(node.ctx);
  node.ctx = nullptr;
}

Status RedisRouter::EnsureConnected(Node& node) {
  if (node.ctx != nullptr && node.ctx->err == 0) return Status::Ok();
  Disconnect(node);
  redisContext* c =
      redisConnectWithTimeout(node.host.c_str(), node.port, Millis(options_.connect_timeout_ms));
  const std::string where = node.host + ":" + std::to_string(node.port);
  if (c == nullptr) return Status::Unavailable("Redis " + where + ": cannot allocate context");
  if (c->err != 0) {
    Status s = Status::Unavailable("Redis " + where + ": " + c->errstr);
    redisFree(c);
    return s;
  }
  if (redisSetTimeout(c, Millis(options_.command_timeout_ms)) != REDIS_OK) {
    redisFree(c);
    return Status::Unavailable("Redis " + where + ": cannot set timeout");
  }
  node.ctx = c;
  return Status::Ok();
}

Status RedisRouter::LoadSlots(int node_index) {
  Node& node = nodes_[node_index];
  auto* raw = static_cast<redisReply*>(redisCommand(node.ctx, "CLUSTER SLOTS"));
  if (raw == nullptr) {
    Status s = Status::Unavailable("Redis " + node.host + ": " + node.ctx->errstr);
    Disconnect(node);
    return s;
  }
  RedisReply reply = Convert(raw);
  freeReplyObject(raw);
  if (reply.type == RedisReply::Type::kError) {
    // Cluster support disabled: a single node serves every key.
    cluster_ = false;
    slots_.fill(static_cast<int16_t>(node_index));
    return Status::Ok();
  }
  if (reply.type != RedisReply::Type::kArray) {
    return Status::Corruption("CLUSTER SLOTS reply is not an array");
  }
  cluster_ = true;
  const std::string asked_host = node.host;  // `node` may move as nodes_ grows
  for (const RedisReply& range : reply.elements) {
    if (range.type != RedisReply::Type::kArray || range.elements.size() < 3 ||
        range.elements[0].type != RedisReply::Type::kInteger ||
        range.elements[1].type != RedisReply::Type::kInteger ||
        range.elements[2].type != RedisReply::Type::kArray ||
        range.elements[2].elements.size() < 2 ||
        range.elements[2].elements[1].type != RedisReply::Type::kInteger) {
      return Status::Corruption("malformed CLUSTER SLOTS entry");
    }
    const int64_t lo = range.elements[0].integer, hi = range.elements[1].integer;
    if (lo < 0 || hi < lo || hi >= kRedisClusterSlots) {
      return Status::Corruption("CLUSTER SLOTS range out of bounds");
    }
    std::string host = range.elements[2].elements[0].str;
    if (host.empty() || host == "?") host = asked_host;
    const int master = NodeFor(host, static_cast<int>(range.elements[2].elements[1].integer));
    for (int64_t s = lo; s <= hi; ++s) slots_[s] = static_cast<int16_t>(master);
  }
  return Status::Ok();
}

Status RedisRouter::ReloadSlots(int unreachable) {
  Status last = Status::Unavailable("Redis: no other node to read the slot map from");
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (static_cast<int>(i) == unreachable) continue;
    Status s = EnsureConnected(nodes_[i]);
    if (s.ok()) s = LoadSlots(static_cast<int>(i));
    if (s.ok()) return s;
    last = s;
  }
  return last;
}

std::vector<Result<RedisReply>> RedisRouter::Execute(std::span<const RedisCommand> commands) {
  MutexLock lock(mu_);
  const size_t n = commands.size();
  std::vector<Result<RedisReply>> results(n, Status::Unavailable("Redis: not sent"));
  std::vector<int> target(n, -1);      // node override from ASK
  std::vector<uint8_t> asking(n, 0);
  std::vector<size_t> pending(n);
  for (size_t i = 0; i < n; ++i) pending[i] = i;

  bool reloaded = false;  // the slot map was re-read after a node was unreachable
  for (int round = 0; round <= options_.max_redirects && !pending.empty(); ++round) {
    std::vector<std::vector<size_t>> by_node(nodes_.size());
    for (size_t i : pending) {
      int node = target[i];
      if (node < 0) node = slots_[RedisKeySlot(commands[i].key)];
      if (node < 0) node = 0;  // unknown slot: any node answers with MOVED
      by_node[node].push_back(i);
    }
    std::vector<size_t> retry;
    bool backoff = false;
    for (size_t ni = 0; ni < by_node.size(); ++ni) {
      if (by_node[ni].empty()) continue;
      Node& node = nodes_[ni];
      Status cs = EnsureConnected(node);
      if (!cs.ok()) {
        for (size_t i : by_node[ni]) results[i] = cs;
        // Failover: its slots may have a new master now (nodes_ may grow here; `node`
        // is not used again).
        if (cluster_ && !reloaded) {
          reloaded = true;
          if (ReloadSlots(static_cast<int>(ni)).ok()) {
            for (size_t i : by_node[ni]) {
              if (target[i] < 0) retry.push_back(i);
            }
          }
        }
        continue;
      }
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (size_t i : by_node[ni]) {
        if (asking[i]) redisAppendCommand(node.ctx, "ASKING");
        argv.clear();
        lens.clear();
        for (const std::string& a : commands[i].argv) {
          argv.push_back(a.data());
          lens.push_back(a.size());
        }
        redisAppendCommandArgv(node.ctx, static_cast<int>(argv.size()), argv.data(), lens.data());
      }
      bool broken = false;
      for (size_t i : by_node[ni]) {
        if (broken) {
          retry.push_back(i);
          continue;
        }
        void* raw = nullptr;
        if (asking[i]) {
          if (redisGetReply(node.ctx, &raw) != REDIS_OK) raw = nullptr;
          if (raw != nullptr) freeReplyObject(raw);
          raw = nullptr;
          asking[i] = 0;
          target[i] = -1;
        }
        if (node.ctx->err != 0 || redisGetReply(node.ctx, &raw) != REDIS_OK || raw == nullptr) {
          results[i] = Status::Unavailable("Redis " + node.host + ":" +
                                           std::to_string(node.port) + ": " + node.ctx->errstr);
          broken = true;
          retry.push_back(i);
          continue;
        }
        RedisReply reply = Convert(static_cast<redisReply*>(raw));
        freeReplyObject(raw);
        std::string host;
        int port = 0;
        if (reply.type == RedisReply::Type::kError) {
          if (ParseRedirect(reply.str, "MOVED", &host, &port)) {
            ++redirects_;
            slots_[RedisKeySlot(commands[i].key)] = static_cast<int16_t>(NodeFor(host, port));
            retry.push_back(i);
            continue;
          }
          if (ParseRedirect(reply.str, "ASK", &host, &port)) {
            ++redirects_;
            target[i] = NodeFor(host, port);
            asking[i] = 1;
            retry.push_back(i);
            continue;
          }
          if (reply.str.rfind("TRYAGAIN", 0) == 0 || reply.str.rfind("CLUSTERDOWN", 0) == 0) {
            results[i] = Status::Unavailable("Redis: " + reply.str);
            backoff = true;
            retry.push_back(i);
            continue;
          }
        }
        results[i] = std::move(reply);
      }
      if (broken) Disconnect(node);  // reopened in the next round
    }
    pending.swap(retry);
    if (backoff && !pending.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i : pending) {
    if (results[i].ok()) continue;
    results[i] = Status::Unavailable("Redis: too many redirections or retries (" +
                                     results[i].status().message() + ")");
  }
  return results;
}

}  // namespace kvstash::store
