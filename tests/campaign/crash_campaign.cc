// crash_campaign: rounds of kill -9 of a real kvstash-server during a mixed
// PUT/GET/DELETE/PIN load, with T0 (memory), T1 (RocksDB) and T2 (a real redis-server
// started here) on. After each restart it checks what the store promises
// (store/store.h "Guarantees", docs/protocol.md §5.3):
//   lost          an acknowledged PUT (not deleted since) is absent or has other bytes
//   half_visible  a chunk that LOOKUP and GET disagree about (one sees it, the other
//                 not), or a chain whose stored run has a hole (a chunk present while
//                 its parent is not)
//   wrong_bytes   any GET (during the load or after a restart) returned bytes that are
//                 not a value the key may hold at that moment (never a torn, stale or
//                 other key's payload)
// All three must be 0. Prints one JSON document (and writes it with --json).
//
// Model: the key space is `chains` prefix chains of `chain_len` chunks (chunk j's
// parent is chunk j-1). Each worker thread owns a disjoint set of chains and has at
// most one call in flight, so for every chunk the set of values it may hold is exact:
// an acknowledged PUT sets it to {that version}, an acknowledged DELETE to {absent}
// for the chunk and its descendants, and a call cut off by the kill adds its outcome
// to the set (it may or may not have committed). Budgets: T0 and T1 small (memory
// copies drop, T1 demotes to T2), T2 large enough never to evict, so nothing
// acknowledged may disappear; pins come and go (a pinned chunk stays in T1).
//
// Usage: crash_campaign --server-bin PATH [--rounds N] [--seconds S] [--seed N]
//                       [--work-dir DIR] [--json FILE]
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include "kvstash/client.h"
#include "tests/server/server_process.h"
#include "tests/server/test_payloads.h"
#include "tests/store/store_test_util.h"

namespace kvstash::campaign {
namespace {

constexpr int kAbsent = -1;
constexpr uint32_t kTokens = 16;  // RawPayload(16, ...) as stored: 2200 bytes

struct Options {
  std::string server_bin;
  std::string work_dir;
  std::string json_out;
  uint64_t rounds = 100;
  double seconds = 0;  // > 0: stop starting rounds after this long
  uint64_t seed = 1;
  uint32_t chains = 48, chain_len = 6, workers = 6;
  uint32_t min_load_ms = 20, max_load_ms = 300;
};

struct Counts {
  uint64_t rounds = 0, restarts = 0;
  uint64_t puts = 0, gets = 0, deletes = 0, pins = 0, lookups = 0;
  uint64_t acked_puts = 0, acked_deletes = 0, cut_off = 0, get_hits = 0;
  uint64_t verified_present = 0, verified_absent = 0, uncertain_resolved = 0;
  uint64_t lost = 0, half_visible = 0, wrong_bytes = 0;
  uint64_t other_errors = 0;
  uint64_t tier_entries_after_restart[3] = {}, tier_hits_in_verify[3] = {};
  std::vector<std::string> examples;  // first few violations, for the report
};

StoredKey ChunkKeyOf(uint32_t chain, uint32_t j) {
  StoredKey k{};
  uint64_t x = (uint64_t{chain} << 20 | j) * 0x9E3779B97F4A7C15ull + 0x6b767374;
  for (size_t i = 0; i < k.size(); ++i) {
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    k[i] = static_cast<uint8_t>(x >> 56);
  }
  return k;
}

// Payload of version v of chunk (chain, j): distinct bytes per (chain, j, v).
uint32_t SeedOf(uint32_t chain, uint32_t j, int v) {
  return chain * 1000003u + j * 7919u + static_cast<uint32_t>(v) * 104729u + 1;
}

class Campaign {
 public:
  explicit Campaign(Options o) : o_(std::move(o)), rng_(o_.seed) {
    possible_.assign(o_.chains, std::vector<std::set<int>>(o_.chain_len, {kAbsent}));
    next_version_.assign(o_.chains, std::vector<int>(o_.chain_len, 0));
  }

  int Run() {
    namespace fs = std::filesystem;
    fs::create_directories(o_.work_dir);
    std::string error;
    redis_ = store::testing::RedisServer::Start(o_.work_dir, false, &error);
    if (!redis_) {
      std::cerr << "crash_campaign: redis-server: " << error << "\n";
      return 1;
    }
    config_ = o_.work_dir + "/server.json";
    std::ofstream(config_) << "{\"tenants\": [{\"name\": \"c\", \"credential\": \"pc\"}],"
                           << " \"store\": {\"path\": \"" << o_.work_dir << "/db\","
                           << " \"memory_budget_bytes\": " << 24 * 2184 << ","
                           << " \"disk_budget_bytes\": " << 96 * 2184 << ","
                           << " \"remote_budget_bytes\": " << (64ull << 20) << ","
                           << " \"redis\": {\"endpoints\": [\"" << redis_->endpoint()
                           << "\"]}}}";
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t r = 0; r < o_.rounds; ++r) {
      if (o_.seconds > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
              o_.seconds) {
        break;
      }
      if (!Round()) return 1;
      ++c_.rounds;
      if (c_.rounds % 25 == 0) {
        std::cerr << "round " << c_.rounds << ": ops " << Ops() << ", lost " << c_.lost
                  << ", half_visible " << c_.half_visible << ", wrong_bytes " << c_.wrong_bytes
                  << "\n";
      }
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Report(wall);
    return c_.lost == 0 && c_.half_visible == 0 && c_.wrong_bytes == 0 ? 0 : 3;
  }

 private:
  uint64_t Ops() const { return c_.puts + c_.gets + c_.deletes + c_.pins + c_.lookups; }

  std::unique_ptr<Client> Connect(const server::testing::ServerProcess& s) {
    ClientOptions co;
    co.servers = {s.address()};
    co.tenant = "c";
    co.credential = "pc";
    co.connections_per_server = 2;
    co.max_attempts = 1;  // a call cut off by the kill must not be retried elsewhere
    co.default_deadline = std::chrono::milliseconds(3000);
    co.connect_timeout = std::chrono::milliseconds(1000);
    return Client::Create(co).value();
  }

  void Violation(uint64_t* counter, const std::string& what) {
    std::lock_guard l(mu_);
    ++*counter;
    std::cerr << "VIOLATION (round " << c_.rounds << "): " << what << "\n";
    if (c_.examples.size() < 20) c_.examples.push_back(what);
  }

  // One round: start, check everything, load, kill -9.
  bool Round() {
    server::testing::ServerProcess s;
    if (Status st = s.Start(o_.server_bin, o_.work_dir, {"--config", config_}); !st.ok()) {
      std::cerr << "crash_campaign: " << st.ToString() << "\n";
      return false;
    }
    ++c_.restarts;
    auto client = Connect(s);
    Verify(*client);
    RecordTiers(s.http_port());
    std::atomic<bool> killed{false};
    std::vector<std::thread> workers;
    for (uint32_t w = 0; w < o_.workers; ++w) {
      workers.emplace_back([&, w, seed = rng_()] { Load(*client, w, seed, killed); });
    }
    std::uniform_int_distribution<uint32_t> ms(o_.min_load_ms, o_.max_load_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms(rng_)));
    killed = true;  // no new calls; the ones in flight are cut off by the kill
    s.Kill(SIGKILL);
    for (auto& t : workers) t.join();
    return true;
  }

  // Server-wide tier counters after a restart and its verification (shows that T1
  // demotes to T2 and that reads are served from every tier).
  void RecordTiers(int http_port) {
    namespace asio = boost::asio;
    try {
      asio::io_context ioc;
      asio::ip::tcp::socket sock(ioc);
      sock.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(http_port)});
      asio::write(sock, asio::buffer(std::string(
                            "GET /v1/stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")));
      std::string all;
      boost::system::error_code ec;
      asio::read(sock, asio::dynamic_buffer(all), ec);
      auto j = nlohmann::json::parse(all.substr(all.find("\r\n\r\n") + 4));
      for (int t = 0; t < 3; ++t) {
        c_.tier_entries_after_restart[t] += j["tiers"][t]["entries"].get<uint64_t>();
        c_.tier_hits_in_verify[t] += j["tiers"][t]["hits"].get<uint64_t>();
      }
    } catch (const std::exception& e) {
      ++c_.other_errors;
      if (c_.examples.size() < 20) c_.examples.push_back(std::string("/v1/stats: ") + e.what());
    }
  }

  // A GET reply for chunk (chain, j) is right when its bytes are one of the values the
  // chunk may hold. Returns the version matched, or nullopt (wrong bytes).
  std::optional<int> Match(uint32_t chain, uint32_t j, const std::vector<uint8_t>& payload) {
    for (int v : possible_[chain][j]) {
      if (v != kAbsent &&
          payload == server::testing::Bound(server::testing::RawPayload(kTokens, SeedOf(chain, j, v)),
                                            ChunkKeyOf(chain, j))) {
        return v;
      }
    }
    return std::nullopt;
  }

  static std::string Where(uint32_t chain, uint32_t j) {
    return "chain " + std::to_string(chain) + " chunk " + std::to_string(j);
  }

  // After a restart: every chunk GET and every chain LOOKUP against the model, then the
  // model collapses to what was observed.
  void Verify(Client& client) {
    for (uint32_t chain = 0; chain < o_.chains; ++chain) {
      const StoredKey route = ChunkKeyOf(chain, 0);
      std::vector<bool> present(o_.chain_len, false);
      for (uint32_t j = 0; j < o_.chain_len; ++j) {
        std::set<int>& p = possible_[chain][j];
        const bool was_uncertain = p.size() > 1;
        auto g = client.Get(route, ChunkKeyOf(chain, j));
        ++c_.gets;
        if (g.ok()) {
          auto v = Match(chain, j, g->payload);
          if (!v) {
            Violation(&c_.wrong_bytes, "after restart: " + Where(chain, j) + " has bytes of no "
                                       "version it may hold");
            continue;
          }
          present[j] = true;
          p = {*v};
          ++c_.verified_present;
        } else if (g.status().IsNotFound()) {
          if (!p.count(kAbsent)) {
            Violation(&c_.lost, "after restart: " + Where(chain, j) + " acknowledged version " +
                                    std::to_string(*p.begin()) + " is missing");
          }
          p = {kAbsent};
          ++c_.verified_absent;
        } else {
          ++c_.other_errors;
          if (c_.examples.size() < 20) c_.examples.push_back("verify GET: " + g.status().ToString());
          continue;
        }
        if (was_uncertain) ++c_.uncertain_resolved;
      }
      // The stored run from the start is what LOOKUP reports, and no chunk is present
      // past a missing one (a chain without its parent would be half-visible).
      uint32_t run = 0;
      while (run < o_.chain_len && present[run]) ++run;
      for (uint32_t j = run; j < o_.chain_len; ++j) {
        if (present[j]) Violation(&c_.half_visible, Where(chain, j) + " present without its parent");
      }
      std::vector<ChunkRef> refs;
      for (uint32_t j = 0; j < o_.chain_len; ++j) refs.push_back({ChunkKeyOf(chain, j), kTokens});
      auto l = client.Lookup(refs);
      ++c_.lookups;
      if (!l.ok()) {
        ++c_.other_errors;
        continue;
      }
      if (l->matched_chunks != run || l->matched_tokens != uint64_t{run} * kTokens) {
        Violation(&c_.half_visible, "chain " + std::to_string(chain) + ": LOOKUP matches " +
                                        std::to_string(l->matched_chunks) + " chunks, GET finds " +
                                        std::to_string(run));
      }
    }
  }

  // One worker: random operations on its own chains, one call at a time, until the kill.
  void Load(Client& client, uint32_t w, uint64_t seed, const std::atomic<bool>& killed) {
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> mine;
    for (uint32_t chain = w; chain < o_.chains; chain += o_.workers) mine.push_back(chain);
    Counts local;
    while (!killed) {
      const uint32_t chain = mine[rng() % mine.size()];
      auto& poss = possible_[chain];  // only this worker touches this chain
      const StoredKey route = ChunkKeyOf(chain, 0);
      const uint32_t r = static_cast<uint32_t>(rng() % 100);
      // The first chunk not known present: PUTs extend the chain there (or rewrite).
      uint32_t end = 0;
      while (end < o_.chain_len && !poss[end].count(kAbsent)) ++end;
      if (r < 45) {
        uint32_t j = end < o_.chain_len && rng() % 4 != 0 ? end
                                                           : static_cast<uint32_t>(rng() % (end + 1));
        if (j >= o_.chain_len) j = o_.chain_len - 1;
        const int v = next_version_[chain][j]++;
        PutChunk p;
        p.route = route;
        p.key = ChunkKeyOf(chain, j);
        if (j > 0) p.parent = ChunkKeyOf(chain, j - 1);
        p.payload = server::testing::RawPayload(kTokens, SeedOf(chain, j, v));
        p.pin = rng() % 16 == 0;
        Status st = client.Put(p);
        ++local.puts;
        if (st.ok()) {
          poss[j] = {v};
          ++local.acked_puts;
        } else if (st.IsNotFound()) {
          // Parent not stored: nothing written. Only possible when the parent may be absent.
          if (j > 0 && !poss[j - 1].count(kAbsent)) {
            Violation(&c_.lost, "PUT " + Where(chain, j) + ": parent reported missing: " +
                                    st.ToString());
          }
        } else if (st.code() == Status::Code::kResourceExhausted && !killed) {
          // T1 full of pinned chunks: refused, nothing written.
        } else {
          poss[j].insert(v);  // cut off: it may have committed
          ++local.cut_off;
          if (!killed) ++local.other_errors;
        }
      } else if (r < 80) {
        const uint32_t j = static_cast<uint32_t>(rng() % o_.chain_len);
        auto g = client.Get(route, ChunkKeyOf(chain, j));
        ++local.gets;
        if (g.ok()) {
          ++local.get_hits;
          if (auto v = Match(chain, j, g->payload)) {
            poss[j] = {*v};
          } else {
            Violation(&c_.wrong_bytes, "during load: GET " + Where(chain, j) +
                                           " returned bytes of no version it may hold");
          }
        } else if (g.status().IsNotFound()) {
          if (!poss[j].count(kAbsent)) {
            Violation(&c_.lost, "during load: GET " + Where(chain, j) + " missing");
          }
          poss[j] = {kAbsent};
        } else {
          ++local.cut_off;
          if (!killed) ++local.other_errors;
        }
      } else if (r < 90) {
        const uint32_t j = static_cast<uint32_t>(rng() % o_.chain_len);
        auto d = client.Delete(route, ChunkKeyOf(chain, j));
        ++local.deletes;
        for (uint32_t k = j; k < o_.chain_len; ++k) {
          if (d.ok()) poss[k] = {kAbsent};
          else poss[k].insert(kAbsent);
        }
        if (d.ok()) {
          ++local.acked_deletes;
        } else {
          ++local.cut_off;
          if (!killed) ++local.other_errors;
        }
      } else {
        const uint32_t j = static_cast<uint32_t>(rng() % o_.chain_len);
        Status st = client.Pin(route, ChunkKeyOf(chain, j), rng() % 3 == 0);
        ++local.pins;
        if (!st.ok() && !st.IsNotFound()) {
          ++local.cut_off;
          if (!killed) ++local.other_errors;
        }
      }
    }
    std::lock_guard l(mu_);
    c_.puts += local.puts;
    c_.gets += local.gets;
    c_.deletes += local.deletes;
    c_.pins += local.pins;
    c_.acked_puts += local.acked_puts;
    c_.acked_deletes += local.acked_deletes;
    c_.cut_off += local.cut_off;
    c_.get_hits += local.get_hits;
    c_.other_errors += local.other_errors;
  }

  void Report(double wall_s) {
    nlohmann::json j = {
        {"campaign", "crash"},
        {"tiers", "T0 memory + T1 RocksDB + T2 redis-server (single node)"},
        {"seed", o_.seed},
        {"chains", o_.chains},
        {"chain_len", o_.chain_len},
        {"workers", o_.workers},
        {"load_ms_per_round", {o_.min_load_ms, o_.max_load_ms}},
        {"rounds", c_.rounds},
        {"restarts", c_.restarts},
        {"operations", Ops()},
        {"ops", {{"put", c_.puts}, {"get", c_.gets}, {"delete", c_.deletes}, {"pin", c_.pins},
                 {"lookup", c_.lookups}}},
        {"acked_puts", c_.acked_puts},
        {"acked_deletes", c_.acked_deletes},
        {"get_hits_during_load", c_.get_hits},
        {"calls_cut_off_by_kill", c_.cut_off},
        {"verified_present", c_.verified_present},
        {"verified_absent", c_.verified_absent},
        {"uncertain_resolved", c_.uncertain_resolved},
        {"errors_other_than_the_kill", c_.other_errors},
        {"tier_entries_after_restart_sum", {{"T0", c_.tier_entries_after_restart[0]},
                                            {"T1", c_.tier_entries_after_restart[1]},
                                            {"T2", c_.tier_entries_after_restart[2]}}},
        {"tier_hits_in_verification_sum", {{"T0", c_.tier_hits_in_verify[0]},
                                           {"T1", c_.tier_hits_in_verify[1]},
                                           {"T2", c_.tier_hits_in_verify[2]}}},
        {"lost", c_.lost},
        {"half_visible", c_.half_visible},
        {"wrong_bytes", c_.wrong_bytes},
        {"violations", c_.examples},
        {"wall_s", wall_s}};
    std::cout << j.dump(2) << "\n";
    if (!o_.json_out.empty()) std::ofstream(o_.json_out) << j.dump(2) << "\n";
  }

  Options o_;
  std::mt19937_64 rng_;
  std::unique_ptr<store::testing::RedisServer> redis_;
  std::string config_;
  std::mutex mu_;  // guards c_ while workers run (each worker owns its chains' model)
  Counts c_;
  std::vector<std::vector<std::set<int>>> possible_;
  std::vector<std::vector<int>> next_version_;
};

}  // namespace
}  // namespace kvstash::campaign

int main(int argc, char** argv) {
  kvstash::campaign::Options o;
  o.work_dir = std::filesystem::temp_directory_path() / ("kvstash-crash-" + std::to_string(getpid()));
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "crash_campaign: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    try {
      if (a == "--server-bin") o.server_bin = next();
      else if (a == "--rounds") o.rounds = std::stoull(next());
      else if (a == "--seconds") o.seconds = std::stod(next());
      else if (a == "--seed") o.seed = std::stoull(next());
      else if (a == "--work-dir") o.work_dir = next();
      else if (a == "--json") o.json_out = next();
      else if (a == "--workers") o.workers = static_cast<uint32_t>(std::stoul(next()));
      else {
        std::cerr << "crash_campaign: unknown argument " << a << "\n";
        return 2;
      }
    } catch (const std::exception&) {
      std::cerr << "crash_campaign: bad value for " << a << "\n";
      return 2;
    }
  }
  if (o.server_bin.empty() || o.workers == 0 || o.workers > o.chains) {
    std::cerr << "usage: crash_campaign --server-bin PATH [--rounds N] [--seconds S] [--seed N] "
                 "[--work-dir DIR] [--json FILE] [--workers 1..48]\n";
    return 2;
  }
  const bool own_dir = !std::filesystem::exists(o.work_dir);
  const std::string dir = o.work_dir;
  int rc = kvstash::campaign::Campaign(std::move(o)).Run();
  if (own_dir) std::filesystem::remove_all(dir);
  return rc;
}
