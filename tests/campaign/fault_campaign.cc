// fault_campaign: faults injected into a real kvstash-server under a mixed PUT/GET/
// LOOKUP load (issue 19 "faults under load"), each scenario counting what clients saw:
//   full_disk     T1 (RocksDB) on a 24 MiB tmpfs filled to the brim by PUTs (needs
//                 root for the mount; skipped with a reason otherwise), then a restart
//                 on the still-full filesystem (T1 read-only: reads served), then one
//                 after it grew to 64 MiB
//   read_only_filesystem  T1 on a 256 MiB tmpfs: load, kill -9, the filesystem
//                 remounted read-only (as the kernel does after I/O errors), a restart
//                 (T1 read-only: reads served, every PUT refused), then remounted
//                 read-write and a restart that takes writes; needs root
//   redis_restart T2 on a real redis-server, killed mid-load and restarted on its port
//                 2 s later (T2 keeps nothing across its restart: it is a cache)
//   bad_clients   16 connections sending random bytes and 8 trickling a frame one byte
//                 every 200 ms, beside the normal load
//   sigterm       SIGTERM (drain) during the load, then a restart on the same data
//                 folder; 5 rounds
// Counted per scenario: requests, ok, errors (a call that returned an error status),
// misses (GET NotFound), wrong (a GET that returned bytes other than the key's payload,
// or a LOOKUP hit reported for a key never stored), and lost (an acknowledged PUT
// absent when the scenario promises it: T1-backed data after full disk and SIGTERM).
// wrong must be 0 everywhere, lost 0 where promised. Prints one JSON document (and
// writes it with --json). Exit status: 0 when every count that must be 0 is 0; 3
// otherwise; 1 when a scenario could not run at all.
//
// Model: every PUT writes a fresh key (never overwritten), payload RawPayload(16, seed)
// with a seed unique to the key, so any bytes a GET returns are checkable alone.
//
// Usage: fault_campaign --server-bin PATH [--work-dir DIR] [--json FILE]
//                       [--only full_disk|read_only_filesystem|redis_restart|bad_clients|sigterm]
//                       [--seconds S]
// --work-dir defaults to a fresh mkdtemp folder under /tmp; --seconds (load per phase,
// > 0) to 6. Exit status 2 for a usage error.
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include "kvstash/client.h"
#include "tests/server/http_get.h"
#include "tests/server/server_process.h"
#include "tests/server/test_payloads.h"
#include "tests/store/store_test_util.h"

namespace kvstash::campaign {
namespace {

using server::testing::Bound;
using server::testing::RawPayload;
using server::testing::ServerProcess;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kTokens = 16;  // RawPayload(16, ...) as stored: 2200 bytes
constexpr const char* kTenant = "f";  // the one tenant every scenario's server knows
constexpr const char* kCredential = "pf";

// Options of a client of the server at `address` as that tenant.
ClientOptions ClientFor(const std::string& address) {
  ClientOptions o;
  o.servers = {address};
  o.tenant = kTenant;
  o.credential = kCredential;
  return o;
}

struct Options {
  std::string server_bin, work_dir, json_out, only;
  double seconds = 6;  // load per scenario phase
};

StoredKey KeyOf(uint32_t seed) {
  StoredKey k{};
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x6661756c74ull;
  for (size_t i = 0; i < k.size(); ++i) {
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    k[i] = static_cast<uint8_t>(x >> 56);
  }
  return k;
}

struct Tally {
  std::atomic<uint64_t> requests{0}, ok{0}, errors{0}, misses{0}, wrong{0}, lost{0};
  std::mutex mu;
  std::vector<std::string> examples;  // first few errors and violations; GUARDED_BY(mu)
  void Example(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (examples.size() < 6) examples.push_back(what);
  }
  nlohmann::json Json() {
    std::lock_guard<std::mutex> lock(mu);
    return {{"requests", requests.load()}, {"ok", ok.load()},     {"errors", errors.load()},
            {"misses", misses.load()},     {"wrong", wrong.load()}, {"lost", lost.load()},
            {"examples", examples}};
  }
};

// Workers PUT fresh keys, GET acknowledged ones and LOOKUP both kinds until Stop().
class Load {
 public:
  Load(std::string address, uint32_t workers, uint32_t first_seed, Tally* t)
      : address_(std::move(address)), workers_(workers), next_seed_(first_seed), t_(t) {}
  ~Load() { Stop(); }

  void Start() {
    stop_ = false;
    for (uint32_t w = 0; w < workers_; ++w) threads_.emplace_back([this, w] { Work(w); });
  }
  void Stop() {
    stop_ = true;
    for (auto& th : threads_) th.join();
    threads_.clear();
  }
  // Seeds of acknowledged PUTs.
  std::vector<uint32_t> Acked() {
    std::lock_guard<std::mutex> lock(mu_);
    return acked_;
  }

 private:
  void Work(uint32_t w) {
    ClientOptions o = ClientFor(address_);
    o.default_deadline = std::chrono::milliseconds(2000);
    o.max_attempts = 2;
    std::unique_ptr<Client> c;
    std::mt19937 rng(w * 7919 + 1);
    while (!stop_) {
      if (!c) {
        auto made = Client::Create(o);
        if (!made.ok()) {  // the server is down (SIGTERM scenario): an error, try again
          t_->requests++;
          t_->errors++;
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          continue;
        }
        c = std::move(made).value();
      }
      const int op = static_cast<int>(rng() % 4);
      if (op <= 1) {
        Put(*c);
      } else {
        uint32_t seed = 0;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (acked_.empty()) continue;
          seed = acked_[rng() % acked_.size()];
        }
        op == 2 ? Get(*c, seed) : Lookup(*c, seed);
      }
    }
  }
  void Put(Client& c) {
    const uint32_t seed = next_seed_++;
    PutChunk p;
    p.route = p.key = KeyOf(seed);
    p.payload = RawPayload(kTokens, seed);
    t_->requests++;
    if (Status s = c.Put(p); s.ok()) {
      t_->ok++;
      std::lock_guard<std::mutex> lock(mu_);
      acked_.push_back(seed);
    } else {
      t_->errors++;
      t_->Example("PUT: " + s.ToString());
    }
  }
  void Get(Client& c, uint32_t seed) {
    t_->requests++;
    auto r = c.Get(KeyOf(seed), KeyOf(seed));
    if (r.ok()) {
      if (r->payload == Bound(RawPayload(kTokens, seed), KeyOf(seed))) {
        t_->ok++;
      } else {
        t_->wrong++;
        t_->Example("GET returned other bytes for seed " + std::to_string(seed));
      }
    } else if (r.status().IsNotFound()) {
      t_->misses++;
    } else {
      t_->errors++;
      t_->Example("GET: " + r.status().ToString());
    }
  }
  // LOOKUP of [acked key, never-stored key]: at most the first may match.
  void Lookup(Client& c, uint32_t seed) {
    t_->requests++;
    const std::vector<ChunkRef> chain = {{KeyOf(seed), kTokens}, {KeyOf(0xFFFFFFF0u - seed), kTokens}};
    auto r = c.Lookup(chain);
    if (!r.ok()) {
      t_->errors++;
      t_->Example("LOOKUP: " + r.status().ToString());
    } else if (r->matched_chunks > 1) {
      t_->wrong++;
      t_->Example("LOOKUP matched a key never stored");
    } else {
      r->matched_chunks == 1 ? t_->ok++ : t_->misses++;
    }
  }

  const std::string address_;
  const uint32_t workers_;
  std::atomic<uint32_t> next_seed_;
  Tally* t_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::vector<uint32_t> acked_;  // GUARDED_BY(mu_)
};

// GETs every acknowledged seed: absent counts as lost when `promised`, else a miss.
void Verify(const std::string& address, const std::vector<uint32_t>& acked, bool promised, Tally* t) {
  auto c = Client::Create(ClientFor(address));
  if (!c.ok()) {
    t->errors++;
    t->Example("verify: " + c.status().ToString());
    return;
  }
  for (uint32_t seed : acked) {
    t->requests++;
    auto r = (*c)->Get(KeyOf(seed), KeyOf(seed));
    if (r.ok() && r->payload == Bound(RawPayload(kTokens, seed), KeyOf(seed))) {
      t->ok++;
    } else if (r.ok()) {
      t->wrong++;
      t->Example("verify: other bytes for seed " + std::to_string(seed));
    } else if (r.status().IsNotFound()) {
      promised ? t->lost++ : t->misses++;
      if (promised) t->Example("verify: acknowledged seed " + std::to_string(seed) + " absent");
    } else {
      t->errors++;
      t->Example("verify: " + r.status().ToString());
    }
  }
}

std::vector<std::string> Tenant() { return {"--tenant", std::string(kTenant) + "=" + kCredential}; }

void Sleep(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// A tmpfs of `size` (mount's size= option, e.g. "24m") mounted on `dir` (created) for
// the lifetime of the object. error(): why it could not be mounted ("" once mounted).
class Tmpfs {
 public:
  Tmpfs(std::string dir, const std::string& size) : dir_(std::move(dir)) {
    if (geteuid() != 0) {
      error_ = "needs root to mount a tmpfs";
      return;
    }
    std::filesystem::create_directories(dir_);
    if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      error_ = std::string("mount tmpfs: ") + std::strerror(errno);
    }
  }
  ~Tmpfs() {
    if (error_.empty()) umount2(dir_.c_str(), MNT_DETACH);
  }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  std::string error_;
};

nlohmann::json FullDisk(const Options& o) {
  nlohmann::json out;
  const std::string disk = o.work_dir + "/full-disk";
  const Tmpfs tmpfs(disk, "24m");
  if (!tmpfs.error().empty()) return {{"skipped", tmpfs.error()}};
  Tally load_t, verify_t, restart_t, grown_t;
  std::vector<std::string> args = Tenant();
  args.insert(args.end(), {"--data-dir", disk + "/db", "--memory-budget", "256K", "--disk-budget", "1G"});
  {
    ServerProcess s;
    if (Status st = s.Start(o.server_bin, o.work_dir, args); !st.ok()) return {{"error", st.ToString()}};
    Load load(s.address(), 4, 1, &load_t);
    load.Start();
    // Until the filesystem is full (PUT errors), then as long again.
    const auto t0 = Clock::now();
    while (load_t.errors.load() < 50 && Clock::now() - t0 < std::chrono::seconds(120)) Sleep(0.2);
    Sleep(o.seconds / 2);
    load.Stop();
    out["seconds_to_full"] = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string health = server::testing::HttpGet(s.http_port(), "/healthz").second;
    out["healthz_when_full"] = health.substr(0, health.find('\n'));
    const auto acked = load.Acked();
    out["acked_puts"] = acked.size();
    Verify(s.address(), acked, true, &verify_t);
    // Restart on the still-full filesystem (T1 opens read-only): every acknowledged PUT
    // must still be there, and /healthz must say why PUTs fail.
    const int rc = s.Kill(SIGTERM);
    out["sigterm_exit"] = rc;
    {
      ServerProcess again;
      if (Status st = again.Start(o.server_bin, o.work_dir, args); !st.ok()) {
        out["restart_on_full_disk"] = st.ToString();
        restart_t.errors++;
        restart_t.Example("restart on the full filesystem: " + st.ToString());
      } else {
        out["restart_on_full_disk"] = "ok";
        out["healthz_after_restart"] = server::testing::HttpGet(again.http_port(), "/healthz").second;
        Verify(again.address(), acked, true, &restart_t);
        // A second server on the same data directory (a read-write open, as after space
        // came back) must be refused: the read-only one holds the database's LOCK.
        const std::string second_dir = o.work_dir + "/second-server";
        std::filesystem::create_directories(second_dir);
        ServerProcess second;
        const bool second_started = second.Start(o.server_bin, second_dir, args).ok();
        out["second_server_on_the_data_dir"] = second_started ? "started" : "refused";
        if (second_started) {
          restart_t.errors++;
          restart_t.Example("a second server opened the read-only server's data directory");
        }
        out["read_only_sigterm_exit"] = again.Kill(SIGTERM);  // before the next open
      }
    }
    // The operator frees space (here: the filesystem grows): the restart must find
    // every acknowledged PUT.
    if (mount("tmpfs", disk.c_str(), "tmpfs", MS_REMOUNT, "size=64m") != 0) {
      out["grow"] = std::string("remount: ") + std::strerror(errno);
    } else {
      ServerProcess grown;
      if (Status st = grown.Start(o.server_bin, o.work_dir, args); !st.ok()) {
        out["restart_after_growing"] = st.ToString();
        grown_t.errors++;
      } else {
        out["restart_after_growing"] = "ok";
        Verify(grown.address(), acked, true, &grown_t);
      }
    }
  }
  out["load"] = load_t.Json();
  out["verify"] = verify_t.Json();
  out["verify_after_restart"] = restart_t.Json();
  out["verify_after_growing"] = grown_t.Json();
  return out;
}

nlohmann::json ReadOnlyFilesystem(const Options& o) {
  nlohmann::json out;
  const std::string disk = o.work_dir + "/ro-disk";
  // Room for the WAL the read-write restart at the end flushes (tmpfs takes memory only
  // for what is written).
  const Tmpfs tmpfs(disk, "256m");
  if (!tmpfs.error().empty()) return {{"skipped", tmpfs.error()}};
  Tally load_t, ro_load_t, ro_verify_t, rw_verify_t;
  std::vector<std::string> args = Tenant();
  args.insert(args.end(), {"--data-dir", disk + "/db", "--memory-budget", "256K"});
  std::vector<uint32_t> acked;
  {
    ServerProcess s;
    if (Status st = s.Start(o.server_bin, o.work_dir, args); !st.ok()) return {{"error", st.ToString()}};
    Load load(s.address(), 4, 1, &load_t);
    load.Start();
    Sleep(o.seconds / 2);
    out["kill_9_exit"] = s.Kill(SIGKILL);  // a crash: the WAL is not flushed
    load.Stop();
    acked = load.Acked();
    out["acked_puts"] = acked.size();
  }
  // The kernel remounts a disk read-only after I/O errors (ext4 errors=remount-ro).
  if (mount("tmpfs", disk.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=256m") != 0) {
    return {{"error", std::string("remount read-only: ") + std::strerror(errno)}};
  }
  {
    ServerProcess s;
    if (Status st = s.Start(o.server_bin, o.work_dir, args); !st.ok()) {
      out["restart_on_read_only_filesystem"] = st.ToString();
      ro_verify_t.errors++;
      ro_verify_t.Example("restart on the read-only filesystem: " + st.ToString());
    } else {
      out["restart_on_read_only_filesystem"] = "ok";
      out["healthz_on_read_only_filesystem"] = server::testing::HttpGet(s.http_port(), "/healthz").second;
      Verify(s.address(), acked, true, &ro_verify_t);
      // PUTs must fail (nothing can be written), GETs of what was stored still served.
      Load load(s.address(), 2, 1u << 24, &ro_load_t);
      load.Start();
      Sleep(o.seconds / 3);
      load.Stop();
      out["puts_acked_on_read_only_filesystem"] = load.Acked().size();
      if (!load.Acked().empty()) {
        ro_load_t.lost += load.Acked().size();  // acknowledged but cannot have been written
        ro_load_t.Example("a PUT was acknowledged on the read-only filesystem");
      }
      out["read_only_sigterm_exit"] = s.Kill(SIGTERM);
    }
  }
  // Remounted read-write (the disk checked): the restart takes writes again and finds
  // every acknowledged PUT.
  if (mount("tmpfs", disk.c_str(), "tmpfs", MS_REMOUNT, "size=256m") != 0) {
    return {{"error", std::string("remount read-write: ") + std::strerror(errno)}};
  }
  {
    ServerProcess s;
    if (Status st = s.Start(o.server_bin, o.work_dir, args); !st.ok()) {
      out["restart_after_remount"] = st.ToString();
      rw_verify_t.errors++;
    } else {
      out["restart_after_remount"] = "ok";
      const std::string health = server::testing::HttpGet(s.http_port(), "/healthz").second;
      out["healthz_after_remount"] = health;
      if (health != "ok\n") {
        rw_verify_t.errors++;
        rw_verify_t.Example("not healthy after the remount: " + health);
      }
      Verify(s.address(), acked, true, &rw_verify_t);
    }
  }
  out["load"] = load_t.Json();
  out["verify_on_read_only_filesystem"] = ro_verify_t.Json();
  out["load_on_read_only_filesystem"] = ro_load_t.Json();
  out["verify_after_remount"] = rw_verify_t.Json();
  return out;
}

nlohmann::json RedisRestart(const Options& o) {
  std::string error;
  auto redis = store::testing::RedisServer::Start(o.work_dir, false, &error);
  if (!redis) return {{"skipped", "redis-server: " + error}};
  const int port = redis->port();
  const std::string cfg = o.work_dir + "/redis-restart.json";
  std::filesystem::remove_all(o.work_dir + "/redis-db");
  std::ofstream(cfg) << "{\"tenants\": [{\"name\": \"" << kTenant << "\", \"credential\": \"" << kCredential
                     << "\"}],"
                     << " \"store\": {\"path\": \"" << o.work_dir << "/redis-db\","
                     << " \"memory_budget_bytes\": " << 64 * 2184 << ", \"disk_budget_bytes\": " << 256 * 2184
                     << ", \"remote_budget_bytes\": " << (256ull << 20) << ", \"redis\": {\"endpoints\": [\""
                     << redis->endpoint() << "\"]}}}";
  ServerProcess s;
  if (Status st = s.Start(o.server_bin, o.work_dir, {"--config", cfg}); !st.ok()) return {{"error", st.ToString()}};
  Tally before, outage, after;
  nlohmann::json out;
  {
    Load load(s.address(), 4, 1, &before);
    load.Start();
    Sleep(o.seconds / 2);
    load.Stop();
  }
  redis.reset();  // killed
  {
    Load load(s.address(), 4, 1u << 20, &outage);
    load.Start();
    Sleep(2.0);
    out["healthz_during_outage"] = server::testing::HttpGet(s.http_port(), "/healthz").second;
    redis = store::testing::RedisServer::Start(o.work_dir, false, &error, port);
    if (!redis) return {{"error", "redis restart on port " + std::to_string(port) + ": " + error}};
    Sleep(o.seconds / 2);
    load.Stop();
  }
  {
    Load load(s.address(), 4, 2u << 20, &after);
    load.Start();
    Sleep(o.seconds / 2);
    load.Stop();
  }
  out["healthz_after"] = server::testing::HttpGet(s.http_port(), "/healthz").second;
  out["before"] = before.Json();
  out["outage"] = outage.Json();
  out["after"] = after.Json();
  return out;
}

nlohmann::json BadClients(const Options& o) {
  ServerProcess s;
  if (Status st = s.Start(o.server_bin, o.work_dir, Tenant()); !st.ok()) return {{"error", st.ToString()}};
  Tally t;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> garbage_sent{0}, trickled{0};
  std::vector<std::thread> bad;
  for (int i = 0; i < 24; ++i) {
    bad.emplace_back([&, i] {
      namespace asio = boost::asio;
      std::mt19937 rng(i + 100);
      while (!stop) {
        asio::io_context ioc;
        asio::ip::tcp::socket sock(ioc);
        boost::system::error_code ec;
        sock.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(s.port())}, ec);
        if (ec) {
          Sleep(0.05);
          continue;
        }
        if (i < 16) {  // garbage: random bytes until the server closes the connection
          for (int k = 0; k < 64 && !stop && !ec; ++k) {
            std::vector<uint8_t> junk(1 + rng() % 512);
            for (auto& b : junk) b = static_cast<uint8_t>(rng());
            asio::write(sock, asio::buffer(junk), ec);
            garbage_sent += junk.size();
          }
        } else {  // slow: a frame header one byte every 200 ms
          for (int k = 0; k < 32 && !stop && !ec; ++k) {
            const uint8_t b = "KVSF"[k % 4];
            asio::write(sock, asio::buffer(&b, 1), ec);
            trickled++;
            Sleep(0.2);
          }
        }
      }
    });
  }
  {
    Load load(s.address(), 4, 1, &t);
    load.Start();
    Sleep(o.seconds * 1.5);
    load.Stop();
  }
  stop = true;
  for (auto& th : bad) th.join();
  auto stats = nlohmann::json::parse(server::testing::HttpGet(s.http_port(), "/v1/stats").second, nullptr, false);
  nlohmann::json out = {{"load", t.Json()},
                        {"garbage_bytes_sent", garbage_sent.load()},
                        {"trickled_bytes", trickled.load()}};
  if (!stats.is_discarded()) {
    out["server_bad_frames"] = stats.value("bad_frames", 0);
    out["server_timeouts"] = stats.value("timeouts", 0);
  }
  return out;
}

nlohmann::json Sigterm(const Options& o) {
  const std::string db = o.work_dir + "/sigterm-db";
  std::filesystem::remove_all(db);
  std::vector<std::string> args = Tenant();
  args.insert(args.end(), {"--data-dir", db, "--memory-budget", "1M", "--drain-timeout-ms", "2000"});
  Tally load_t, verify_t;
  std::vector<uint32_t> acked;
  nlohmann::json rounds = nlohmann::json::array();
  for (uint32_t round = 0; round < 5; ++round) {
    ServerProcess s;
    if (Status st = s.Start(o.server_bin, o.work_dir, args); !st.ok()) return {{"error", st.ToString()}};
    Verify(s.address(), acked, true, &verify_t);  // everything acknowledged before
    Load load(s.address(), 4, 1 + round * (1u << 20), &load_t);
    load.Start();
    Sleep(o.seconds / 3);
    const auto t0 = Clock::now();
    const int rc = s.Kill(SIGTERM);  // waits for the exit while the load runs on
    const double drain_s = std::chrono::duration<double>(Clock::now() - t0).count();
    Sleep(0.3);
    load.Stop();
    const auto now = load.Acked();
    acked.insert(acked.end(), now.begin(), now.end());
    rounds.push_back({{"exit", rc}, {"drain_s", drain_s}, {"acked_so_far", acked.size()}});
  }
  ServerProcess s;
  if (Status st = s.Start(o.server_bin, o.work_dir, args); !st.ok()) return {{"error", st.ToString()}};
  Verify(s.address(), acked, true, &verify_t);
  return {{"rounds", rounds}, {"load", load_t.Json()}, {"verify", verify_t.Json()}};
}

// wrong == 0 everywhere, lost == 0 in every tally.
bool Clean(const nlohmann::json& j) {
  if (j.is_object()) {
    if (j.contains("wrong") && j["wrong"] != 0) return false;
    if (j.contains("lost") && j["lost"] != 0) return false;
    for (const auto& [k, v] : j.items()) {
      if (!Clean(v)) return false;
    }
  }
  return true;
}

int Usage(const std::string& why) {
  std::cerr << "fault_campaign: " << why
            << "\nusage: fault_campaign --server-bin PATH [--work-dir DIR] [--json FILE]"
               " [--only full_disk|read_only_filesystem|redis_restart|bad_clients|sigterm] [--seconds S > 0]\n";
  return 2;
}

int Main(int argc, char** argv) {
  Options o;
  const std::pair<const char*, nlohmann::json (*)(const Options&)> scenarios[] = {
      {"full_disk", FullDisk},         {"read_only_filesystem", ReadOnlyFilesystem},
      {"redis_restart", RedisRestart}, {"bad_clients", BadClients},
      {"sigterm", Sigterm}};
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage("missing value of " + a);
    const std::string v = argv[i + 1];
    if (a == "--server-bin") o.server_bin = v;
    else if (a == "--work-dir") o.work_dir = v;
    else if (a == "--json") o.json_out = v;
    else if (a == "--only") o.only = v;
    else if (a == "--seconds") {
      size_t used = 0;
      try {
        o.seconds = std::stod(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != v.size() || !(o.seconds > 0)) return Usage("--seconds takes a number > 0, not " + v);
    } else {
      return Usage("unknown option " + a);
    }
  }
  if (o.server_bin.empty()) return Usage("--server-bin is required");
  if (!o.only.empty() && std::none_of(std::begin(scenarios), std::end(scenarios),
                                      [&](const auto& s) { return o.only == s.first; })) {
    return Usage("no scenario named " + o.only);
  }
  if (o.work_dir.empty()) {
    char tmpl[] = "/tmp/kvstash-fault-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return Usage(std::string("mkdtemp: ") + std::strerror(errno));
    o.work_dir = tmpl;
  }
  std::filesystem::create_directories(o.work_dir);
  nlohmann::json report = {{"seconds_per_phase", o.seconds}};
  bool ran_all = true;
  for (const auto& [name, run] : scenarios) {
    if (!o.only.empty() && o.only != name) continue;
    const auto t0 = Clock::now();
    std::cerr << "-- " << name << "\n";
    nlohmann::json r;
    try {
      r = run(o);
    } catch (const std::exception& e) {  // e.g. the server died: HTTP connect refused
      r = {{"error", std::string("exception: ") + e.what()}};
    }
    r["wall_s"] = std::chrono::duration<double>(Clock::now() - t0).count();
    ran_all &= !r.contains("error");
    report["scenarios"][name] = r;
  }
  const bool clean = Clean(report);
  report["clean"] = clean;
  std::cout << report.dump(1) << "\n";
  if (!o.json_out.empty()) std::ofstream(o.json_out) << report.dump(1) << "\n";
  if (!ran_all) return 1;
  return clean ? 0 : 3;
}

}  // namespace
}  // namespace kvstash::campaign

int main(int argc, char** argv) { return kvstash::campaign::Main(argc, argv); }
