// The driver of `kvstash-bench server` (server_bench.h): throughput and latency of a kvstash server against a
// redis-server baseline on the same payloads, clients and machine.
//
// What it does
//   1. Starts `kvstash-server` (memory tier only; next to this binary unless
//      --server-bin) and `redis-server` (Debian; --save '' --appendonly no) on free
//      loopback ports, or uses --server HOST:PORT for an already running kvstash.
//   2. Builds `prefixes` prefix chains of `chunks` chunks each; every chunk is a codec-raw
//      payload of a SmolLM2-135M KV chunk shape (30 layers x 3 KV heads x 64, bf16,
//      `chunk_tokens` tokens) whose bytes are real SmolLM2 bf16 weights
//      (benchmarks/data/smollm2_token_embd_bf16.bin, tiled). PUTs them (SET on redis).
//   3. Runs timed phases with `clients` concurrent closed-loop clients (the closed-loop
//      LOOKUP phase gives each client a thread making sync calls, as GET/PUT and redis
//      do, --lookup-driver threads, the default; --lookup-driver async drives them as
//      callback agents on the client library's I/O threads, whose latency then includes
//      client-side queueing; --ops picks phases) (GET/PUT and the
//      redis GET/SET alternate in 4 rounds of seconds/4 each, both servers up, so that
//      background load on the machine weighs on both systems alike), each picking a
//      prefix with Zipf(s) popularity over 1.25 x `prefixes` ranks (the ranks beyond
//      the stored ones are never-seen prefixes, i.e. misses):
//        kvstash LOOKUP  the prefix's chain plus 2 never-stored chunks
//        kvstash GET     one chunk of the prefix (stored prefixes only)
//        kvstash PUT     one chunk of the prefix (overwrite)
//        redis   GET / SET the same chunk bytes under the same keys (hiredis)
//   4. Prints and writes (--json) one row per (system, op): system, op, clients,
//      req_s, mb_s, p50_us, p99_us, plus requests, errors, seconds, mode
//      (closed-loop, or open-loop with offered_req_s: the LOOKUP phase at --lookup-rate
//      per client) and (LOOKUP) hit_rate = tokens hit / tokens looked up. Every GET reply is checked
//      byte-for-byte against the payload that was stored (round trip verified). Rows
//      also say `driver` (async or threads).
#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <future>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "benchmarks/drivers/server_bench.h"
#include "common/checksum.h"
#include "common/file_bytes.h"
#include "kvstash/client.h"
#include "kvstash/payload_format.h"

extern char** environ;

namespace kvstash::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A child process started with posix_spawn, stopped with SIGTERM.
class Child {
 public:
  // `quiet`: the child's stdout goes to /dev/null (redis-server's banner and log).
  Status Start(const std::vector<std::string>& argv, bool quiet = false) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (quiet) posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    const int rc = posix_spawnp(&pid_, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return Status::Unavailable("cannot start " + argv[0]);
    return Status::Ok();
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int st = 0;
      waitpid(pid_, &st, 0);
    }
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

uint16_t FreePort() {
  // Bind port 0, read it back, release it (the child binds it right after).
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Zipf(s) over ranks 0..n-1 by inverse CDF.
class Zipf {
 public:
  Zipf(uint32_t n, double s) : cdf_(n) {
    double sum = 0;
    for (uint32_t i = 0; i < n; ++i) cdf_[i] = (sum += 1.0 / std::pow(i + 1.0, s));
    for (double& c : cdf_) c /= sum;
  }
  uint32_t Sample(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<uint32_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

struct Row {
  std::string system, op;
  uint64_t requests = 0, errors = 0, bytes = 0, tokens = 0, tokens_hit = 0;
  double seconds = 0;
  std::vector<uint32_t> lat_us;
  std::vector<uint32_t> service_us;  // open loop: from the actual send, not the schedule
  bool has_hit_rate = false;
  double offered_req_s = 0;  // open-loop phases only
  std::string driver = "threads";  // how the clients were driven (see RunAgents)

  nlohmann::json Json(uint32_t clients) {
    std::sort(lat_us.begin(), lat_us.end());
    auto pct = [&](double q) -> double {
      if (lat_us.empty()) return 0;
      return lat_us[std::min<size_t>(lat_us.size() - 1, static_cast<size_t>(q * lat_us.size()))];
    };
    nlohmann::json j = {{"system", system}, {"op", op}, {"clients", clients},
                        {"req_s", requests / seconds}, {"mb_s", bytes / seconds / 1e6},
                        {"p50_us", pct(0.50)}, {"p99_us", pct(0.99)},
                        {"requests", requests}, {"errors", errors}, {"seconds", seconds}};
    if (has_hit_rate) j["hit_rate"] = tokens ? static_cast<double>(tokens_hit) / tokens : 0.0;
    j["mode"] = offered_req_s > 0 ? "open-loop" : "closed-loop";
    j["driver"] = driver;
    if (offered_req_s > 0) {
      j["offered_req_s"] = offered_req_s;
      std::sort(service_us.begin(), service_us.end());
      auto spct = [&](double q) -> double {
        if (service_us.empty()) return 0;
        return service_us[std::min<size_t>(service_us.size() - 1, static_cast<size_t>(q * service_us.size()))];
      };
      j["service_p50_us"] = spct(0.50);
      j["service_p99_us"] = spct(0.99);
    }
    return j;
  }
};

// Runs `clients` threads calling op(thread, rng, row) until `seconds` pass: closed loop
// when rate == 0, else each thread on a fixed schedule of `rate` calls per second
// (random phase), latency measured from the scheduled time.
template <typename Op>
Row RunPhase(const std::string& system, const std::string& op_name, uint32_t clients,
             double seconds, Op op, double rate = 0) {
  std::vector<Row> rows(clients);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (uint32_t t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      const auto interval = rate > 0 ? std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(1.0 / rate))
                                     : Clock::duration::zero();
      auto next = t0 + std::chrono::duration_cast<Clock::duration>(
                           interval * std::uniform_real_distribution<double>(0, 1)(rng));
      while (!stop.load(std::memory_order_relaxed)) {
        auto s = Clock::now();
        Clock::time_point sent = s;
        if (rate > 0) {
          std::this_thread::sleep_until(next);
          s = next;
          sent = Clock::now();
          next += interval;
        }
        op(t, rng, rows[t]);
        if (rate > 0) {
          rows[t].service_us.push_back(static_cast<uint32_t>(
              std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent).count()));
        }
        rows[t].lat_us.push_back(static_cast<uint32_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - s).count()));
        rows[t].requests++;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : threads) th.join();
  Row r;
  r.system = system;
  r.op = op_name;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.offered_req_s = rate * clients;
  for (auto& x : rows) {
    r.requests += x.requests;
    r.errors += x.errors;
    r.bytes += x.bytes;
    r.tokens += x.tokens;
    r.tokens_hit += x.tokens_hit;
    r.has_hit_rate |= x.has_hit_rate;
    r.lat_us.insert(r.lat_us.end(), x.lat_us.begin(), x.lat_us.end());
    r.service_us.insert(r.service_us.end(), x.service_us.begin(), x.service_us.end());
  }
  return r;
}

// Closed loop without a thread per client: each of `clients` agents keeps exactly one
// call outstanding and issues its next call from the previous one's completion
// callback (on the client library's I/O threads), as memtier_benchmark drives many
// clients from a few event loops. On a 2-core machine shared with the server, 64
// blocked threads cost more CPU in wake-ups than the server spends on the requests;
// this driver leaves the cores to the system under test. `issue(t, rng, row, done)`
// starts agent t's next call and must call done() from its completion.
template <typename Issue>
Row RunAgents(const std::string& system, const std::string& op_name, uint32_t clients,
              double seconds, Issue issue) {
  struct Agent {
    std::mt19937_64 rng;
    Row row;
    Clock::time_point sent;
  };
  std::vector<Agent> agents(clients);
  std::atomic<bool> stop{false};
  std::atomic<uint32_t> live{clients};
  std::promise<void> all_done;
  std::function<void(uint32_t)> next = [&](uint32_t t) {
    Agent& a = agents[t];
    a.sent = Clock::now();
    issue(t, a.rng, a.row, [&, t] {
      Agent& b = agents[t];
      b.row.lat_us.push_back(static_cast<uint32_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - b.sent).count()));
      b.row.requests++;
      if (stop.load(std::memory_order_relaxed)) {
        if (live.fetch_sub(1) == 1) all_done.set_value();
        return;
      }
      next(t);
    });
  };
  const auto t0 = Clock::now();
  for (uint32_t t = 0; t < clients; ++t) {
    agents[t].rng.seed(1000 + t);
    next(t);
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  all_done.get_future().wait();
  Row r;
  r.system = system;
  r.op = op_name;
  r.driver = "async";
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto& a : agents) {
    r.requests += a.row.requests;
    r.errors += a.row.errors;
    r.bytes += a.row.bytes;
    r.tokens += a.row.tokens;
    r.tokens_hit += a.row.tokens_hit;
    r.has_hit_rate |= a.row.has_hit_rate;
    r.lat_us.insert(r.lat_us.end(), a.row.lat_us.begin(), a.row.lat_us.end());
  }
  return r;
}

// Adds phase `b` into the running total `a` (same system and op).
void Merge(Row* a, Row b) {
  a->system = b.system;
  a->op = b.op;
  a->requests += b.requests;
  a->errors += b.errors;
  a->bytes += b.bytes;
  a->seconds += b.seconds;
  a->lat_us.insert(a->lat_us.end(), b.lat_us.begin(), b.lat_us.end());
}

Status WaitForReadyFile(const std::string& path, nlohmann::json* out) {
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(path);
    if (in) {
      *out = nlohmann::json::parse(in, nullptr, false);
      if (!out->is_discarded()) return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::Unavailable("kvstash-server did not become ready (" + path + ")");
}

}  // namespace

Result<ServerBenchResult> RunServerBench(const ServerBenchOptions& o, std::ostream& log) {
  auto fail = [](const std::string& msg) { return Status::Unavailable(msg); };
  // Payloads: real SmolLM2 bf16 bytes tiled into KV chunk shapes.
  const std::string data_file =
      o.data_file.empty() ? std::string(KVSTASH_SOURCE_DIR) + "/benchmarks/data/smollm2_token_embd_bf16.bin"
                          : o.data_file;
  auto source = ReadFileBytes(data_file);
  if (!source.ok() || source->empty()) return fail(source.status().ToString());
  const KvLayout layout{30, 3, 64, DType::kBF16};
  const uint64_t body_bytes = layout.DataBytes(o.chunk_tokens);
  const uint32_t n_chunks = o.prefixes * o.chunks;
  std::vector<std::vector<uint8_t>> payloads(n_chunks);
  std::vector<StoredKey> keys(n_chunks);
  for (uint32_t i = 0; i < n_chunks; ++i) {
    std::vector<uint8_t> body(body_bytes);
    const size_t start = (static_cast<size_t>(i) * 7919 * 2) % source->size();
    for (size_t b = 0; b < body_bytes; ++b) body[b] = (*source)[(start + b) % source->size()];
    const uint64_t d = Xxh3_64(std::string("bench-chunk-") + std::to_string(i));
    for (int b = 0; b < 16; ++b) keys[i][b] = static_cast<uint8_t>((d >> (8 * (b % 8))) + b);
    PayloadHeader h{.codec = CodecId::kRaw, .layout = layout, .tokens = o.chunk_tokens,
                    .token_offset = (i % o.chunks) * o.chunk_tokens,
                    .content_checksum = Xxh3_64(body), .chunk_key = keys[i]};
    payloads[i] = BuildPayload(h, body).value();
  }
  const size_t payload_bytes = payloads[0].size();
  log << "bench server: " << o.prefixes << " prefixes x " << o.chunks << " chunks of "
            << payload_bytes << " bytes, " << o.clients << " clients, Zipf s=" << o.zipf_s << "\n";

  // kvstash-server.
  std::unique_ptr<Child> server_proc;
  std::string address = o.server;
  const fs::path tmp = fs::temp_directory_path() / ("kvstash-bench-" + std::to_string(getpid()));
  if (std::error_code ec; !fs::create_directories(tmp, ec) && ec) {
    return fail("cannot create " + tmp.string() + ": " + ec.message());
  }
  if (address.empty()) {
    std::string bin = o.server_bin;
    if (bin.empty()) bin = (fs::read_symlink("/proc/self/exe").parent_path() / "kvstash-server").string();
    const std::string ready = (tmp / "ready.json").string();
    server_proc = std::make_unique<Child>();
    const uint64_t budget = static_cast<uint64_t>(n_chunks) * payload_bytes * 2 + (64u << 20);
    Status s = server_proc->Start({bin, "--port", "0", "--http-port", "0", "--ready-file", ready,
                                   "--tenant", "bench=bench-secret", "--memory-budget",
                                   std::to_string(budget), "--max-in-flight", "256",
                                   "--log-level", "warn"});
    if (!s.ok()) return fail(s.ToString());
    nlohmann::json r;
    if (Status w = WaitForReadyFile(ready, &r); !w.ok()) return fail(w.ToString());
    address = "127.0.0.1:" + std::to_string(r["port"].get<int>());
  }
  // Shared clients: a few Client objects (one I/O thread each) over the bench threads.
  const uint32_t n_clients = std::max<uint32_t>(1, std::min<uint32_t>(4, o.clients));
  std::vector<std::unique_ptr<Client>> clients;
  for (uint32_t i = 0; i < n_clients; ++i) {
    ClientOptions co;
    co.servers = {address};
    co.tenant = "bench";
    co.credential = "bench-secret";
    co.connections_per_server = std::max<uint32_t>(1, o.clients / n_clients);
    co.default_deadline = std::chrono::milliseconds(10000);
    auto c = Client::Create(co);
    if (!c.ok()) return fail(c.status().ToString());
    clients.push_back(std::move(c).value());
  }
  auto client_of = [&](uint32_t t) -> Client& { return *clients[t % clients.size()]; };
  auto put_chunk = [&](Client& c, uint32_t i) {
    PutChunk p;
    p.route = keys[(i / o.chunks) * o.chunks];
    p.key = keys[i];
    if (i % o.chunks) p.parent = keys[i - 1];
    p.payload = payloads[i];
    return c.Put(p);
  };
  for (uint32_t i = 0; i < n_chunks; ++i) {
    if (Status s = put_chunk(*clients[0], i); !s.ok()) return fail("populate: " + s.ToString());
  }
  const uint32_t ranks = o.prefixes + o.prefixes / 4;
  const Zipf zipf_all(ranks, o.zipf_s), zipf_stored(o.prefixes, o.zipf_s);
  std::vector<Row> rows;

  auto lookup_chain = [&](std::mt19937_64& rng) {
    const uint32_t p = zipf_all.Sample(rng);
    std::vector<ChunkRef> chain;
    chain.reserve(o.chunks + 2);
    for (uint32_t c = 0; c < o.chunks + 2; ++c) {
      StoredKey k{};
      if (p < o.prefixes && c < o.chunks) {
        k = keys[p * o.chunks + c];
      } else {  // never stored
        const uint64_t d = Xxh3_64("miss-" + std::to_string(p) + "-" + std::to_string(c));
        for (int b = 0; b < 16; ++b) k[b] = static_cast<uint8_t>((d >> (8 * (b % 8))) ^ b);
      }
      chain.push_back({k, o.chunk_tokens});
    }
    return chain;
  };
  auto count_lookup = [&](const Result<LookupResult>& r, size_t n, Row& row) {
    row.has_hit_rate = true;
    row.tokens += static_cast<uint64_t>(n) * o.chunk_tokens;
    if (!r.ok()) {
      row.errors++;
      return;
    }
    row.tokens_hit += r->matched_tokens;
    row.bytes += 4 + 20 * n;
  };
  auto lookup_op = [&](uint32_t t, std::mt19937_64& rng, Row& row) {
    std::vector<ChunkRef> chain = lookup_chain(rng);
    count_lookup(client_of(t).Lookup(chain), chain.size(), row);
  };
  auto lookup_async = [&](uint32_t t, std::mt19937_64& rng, Row& row, std::function<void()> done) {
    std::vector<ChunkRef> chain = lookup_chain(rng);
    const size_t n = chain.size();
    Row* agent_row = &row;  // lives in RunAgents until every call completed
    client_of(t).LookupAsync(std::move(chain), false,
                             [&count_lookup, agent_row, n, done = std::move(done)](
                                 Result<LookupResult> r) {
                               count_lookup(r, n, *agent_row);
                               done();
                             });
  };
  if (o.Runs("lookup")) {
    rows.push_back(o.lookup_driver == "async"
                       ? RunAgents("kvstash", "LOOKUP", o.clients, o.seconds, lookup_async)
                       : RunPhase("kvstash", "LOOKUP", o.clients, o.seconds, lookup_op));
  }
  if (o.Runs("lookup") && o.lookup_rate > 0) {
    rows.push_back(RunPhase("kvstash", "LOOKUP", o.clients, o.seconds, lookup_op, o.lookup_rate));
  }
  std::atomic<uint64_t> mismatches{0};
  auto kv_get = [&](uint32_t t, std::mt19937_64& rng, Row& row) {
    const uint32_t i = zipf_stored.Sample(rng) * o.chunks + static_cast<uint32_t>(rng() % o.chunks);
    auto r = client_of(t).Get(keys[(i / o.chunks) * o.chunks], keys[i]);
    if (!r.ok()) {
      row.errors++;
      return;
    }
    if (r->payload != payloads[i]) mismatches++;
    row.bytes += r->payload.size();
  };
  auto kv_put = [&](uint32_t t, std::mt19937_64& rng, Row& row) {
    // Overwrites keep the chain shape: chunk 0 of a prefix (its parent is never needed).
    const uint32_t i = zipf_stored.Sample(rng) * o.chunks;
    if (!put_chunk(client_of(t), i).ok()) {
      row.errors++;
      return;
    }
    row.bytes += payloads[i].size();
  };

  // redis-server, up at the same time so that GET/SET phases of both systems can be
  // interleaved (the machine's background load then weighs on both alike).
  std::unique_ptr<Child> redis;
  std::vector<redisContext*> conns;
  auto free_conns = [&] {
    for (auto* c : conns) {
      if (c) redisFree(c);
    }
    conns.clear();
  };
  if (!o.skip_redis) {
    const uint16_t port = FreePort();
    redis = std::make_unique<Child>();
    Status s = redis->Start({o.redis_bin, "--port", std::to_string(port), "--save", "",
                             "--appendonly", "no", "--daemonize", "no", "--bind", "127.0.0.1",
                             "--loglevel", "warning", "--dir", tmp.string()},
                            /*quiet=*/true);
    if (!s.ok()) return fail(s.ToString());
    for (int attempt = 0; attempt < 100; ++attempt) {
      redisContext* c = redisConnect("127.0.0.1", port);
      const bool up = c && !c->err;
      if (c) redisFree(c);
      if (up) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    conns.assign(o.clients, nullptr);
    for (auto& c : conns) {
      c = redisConnect("127.0.0.1", port);
      if (!c || c->err) {
        free_conns();
        return fail("cannot connect to redis-server");
      }
    }
  }
  auto set = [&](redisContext* c, uint32_t i) {
    auto* r = static_cast<redisReply*>(redisCommand(c, "SET %b %b", keys[i].data(), keys[i].size(),
                                                    payloads[i].data(), payloads[i].size()));
    const bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    return ok;
  };
  for (uint32_t i = 0; i < n_chunks && !conns.empty(); ++i) {
    if (!set(conns[0], i)) {
      free_conns();
      return fail("redis populate failed");
    }
  }
  auto redis_get = [&](uint32_t t, std::mt19937_64& rng, Row& row) {
    const uint32_t i = zipf_stored.Sample(rng) * o.chunks + static_cast<uint32_t>(rng() % o.chunks);
    auto* r = static_cast<redisReply*>(redisCommand(conns[t], "GET %b", keys[i].data(), keys[i].size()));
    if (!r || r->type != REDIS_REPLY_STRING) {
      row.errors++;
    } else {
      if (r->len != static_cast<long long>(payloads[i].size()) ||
          std::memcmp(r->str, payloads[i].data(), r->len) != 0) {
        mismatches++;
      }
      row.bytes += r->len;
    }
    if (r) freeReplyObject(r);
  };
  auto redis_set = [&](uint32_t t, std::mt19937_64& rng, Row& row) {
    const uint32_t i = zipf_stored.Sample(rng) * o.chunks;
    if (!set(conns[t], i)) row.errors++;
    else row.bytes += payloads[i].size();
  };
  // Rounds of (kvstash, redis) slices; rows of one (system, op) are merged.
  constexpr int kRounds = 4;
  const double slice = o.seconds / kRounds;
  Row kv_get_row, kv_put_row, redis_get_row, redis_set_row;
  for (int round = 0; round < kRounds && o.Runs("get"); ++round) {
    Merge(&kv_get_row, RunPhase("kvstash", "GET", o.clients, slice, kv_get));
    if (!conns.empty()) Merge(&redis_get_row, RunPhase("redis", "GET", o.clients, slice, redis_get));
  }
  for (int round = 0; round < kRounds && o.Runs("put"); ++round) {
    Merge(&kv_put_row, RunPhase("kvstash", "PUT", o.clients, slice, kv_put));
    if (!conns.empty()) Merge(&redis_set_row, RunPhase("redis", "SET", o.clients, slice, redis_set));
  }
  if (o.Runs("get")) rows.push_back(std::move(kv_get_row));
  if (o.Runs("put")) rows.push_back(std::move(kv_put_row));
  if (!conns.empty() && o.Runs("get")) rows.push_back(std::move(redis_get_row));
  if (!conns.empty() && o.Runs("put")) rows.push_back(std::move(redis_set_row));
  free_conns();
  redis.reset();
  clients.clear();
  server_proc.reset();
  fs::remove_all(tmp);

  ServerBenchResult result;
  result.rows = nlohmann::json::array();
  for (Row& r : rows) {
    nlohmann::json j = r.Json(o.clients);
    j["payload_bytes"] = payload_bytes;
    result.rows.push_back(j);
  }
  result.mismatches = mismatches.load();
  return result;
}

}  // namespace kvstash::bench
