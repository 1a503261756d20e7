#include "benchmarks/drivers/link_bench.h"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "benchmarks/drivers/netns_link.h"
#include "demo/demo_artifacts.h"
#include "demo/demo_runner.h"
#include "demo/demo_server.h"
#include "kvstash/client.h"
#include "kvstash/prefix_codec.h"
#include "kvstash/sha256.h"
#include "model/corpus/text_corpus.h"
#include "model/formats/model_loader.h"
#include "model/forward/kv_export.h"
#include "model/forward/prefill.h"
#include "model/predictor/spec_predictor.h"

namespace kvstash::bench {
namespace {

namespace fs = std::filesystem;
using demo::Clock;
using demo::Median;
using demo::Ms;

// A cell runs one untimed restore first when its wire time is at most this (seconds).
constexpr double kWarmupMaxWireS = 5;

// One codec's chain as stored: keys, payloads, sizes.
struct StoredChain {
  std::string name;
  std::unique_ptr<PrefixCodec> codec;
  std::vector<ChunkKey> keys;
  std::vector<PutChunk> puts;  // chain order; their payloads are what GET must return
  uint64_t raw_bytes = 0, stored_bytes = 0;
};

// One restore's phases (milliseconds) and the bytes that arrived.
struct RestoreTimes {
  double lookup = 0, get = 0, server_get = 0, predictor = 0, decode = 0;
  double restore_cpu = 0;  // process CPU ms of the predictor + decode
  uint64_t bytes = 0;
};

// CPU time of this process so far (milliseconds, all threads). While the link is idle
// the other threads (client I/O, delay line) use next to none, so a difference around
// a prefill or a decode is that work's CPU time: robust to other load on the machine.
double CpuMs() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

std::string RateName(double r) {
  char b[32];
  if (r >= 1e9) {
    std::snprintf(b, sizeof b, "%g Gbit/s", r / 1e9);
  } else if (r >= 1e6) {
    std::snprintf(b, sizeof b, "%g Mbit/s", r / 1e6);
  } else {
    std::snprintf(b, sizeof b, "%g kbit/s", r / 1e3);
  }
  return b;
}

// The first `n` tokens of the first evaluation document that has them.
Result<std::pair<std::vector<uint32_t>, std::string>> PrefixTokens(const model::Model& m, uint32_t n) {
  KVSTASH_ASSIGN_OR_RETURN(auto corpus, model::LoadCorpus(*m.tokenizer, model::CorpusSplit::kEvaluation,
                                                          n, 64ull * n));
  for (const auto& d : corpus.documents) {
    if (d.tokens.size() >= n) return std::make_pair(std::vector<uint32_t>(d.tokens.begin(), d.tokens.begin() + n), d.source);
  }
  return Status::InvalidArgument("no evaluation document has " + std::to_string(n) + " tokens");
}

// One timed restore of `c` (see the header); checks the bytes and, once, the KV.
Result<RestoreTimes> RestoreOnce(Client* client, const StoredChain& c, std::span<const uint32_t> tokens,
                                 const model::KvCache& exact, bool check_kv) {
  RestoreTimes t;
  const auto chain = PrefixCodec::LookupChain(c.keys);
  auto t0 = Clock::now();
  KVSTASH_ASSIGN_OR_RETURN(LookupResult lk, client->Lookup(chain));
  t.lookup = Ms(t0, Clock::now());
  if (lk.matched_chunks != c.keys.size()) {
    return Status::Internal(c.name + ": LOOKUP matched " + std::to_string(lk.matched_chunks) + " of " +
                            std::to_string(c.keys.size()) + " chunks");
  }
  const double server_before = demo::ServerGetUs(client);
  t0 = Clock::now();
  KVSTASH_ASSIGN_OR_RETURN(auto payloads,
                           demo::GetChainPayloads(client, c.keys, static_cast<uint32_t>(c.keys.size())));
  t.get = Ms(t0, Clock::now());
  const double server_after = demo::ServerGetUs(client);
  t.server_get = server_before >= 0 && server_after >= 0 ? (server_after - server_before) / 1000 : 0;
  for (size_t i = 0; i < payloads.size(); ++i) {
    t.bytes += payloads[i].size();
    if (payloads[i] != c.puts[i].payload) {
      return Status::Internal(c.name + ": GET of chunk " + std::to_string(i) + " returned other bytes than were PUT");
    }
  }
  PrefixRestoreStats rs;
  t0 = Clock::now();
  const double cpu0 = CpuMs();
  KVSTASH_ASSIGN_OR_RETURN(RestoredPrefix restored, c.codec->Restore(tokens, payloads, &rs));
  t.restore_cpu = CpuMs() - cpu0;
  const double restore_ms = Ms(t0, Clock::now());
  t.predictor = rs.predictor_ms;
  t.decode = restore_ms - rs.predictor_ms;  // decode + checksums + fp32 assembly
  if (check_kv && c.codec->kind() != PrefixCodecKind::kDckv) {
    for (size_t i = 0; i < c.keys.size(); ++i) {
      const uint32_t b = static_cast<uint32_t>(i) * c.codec->options().chunk_tokens;
      KVSTASH_ASSIGN_OR_RETURN(KvChunk want, model::ToKvChunk(exact, b, b + c.keys[i].tokens, DType::kBF16));
      if (want.data != restored.chunks[i].data) {
        return Status::Internal(c.name + ": restored chunk " + std::to_string(i) + " differs from the exact KV");
      }
    }
  }
  return t;
}

}  // namespace

Result<LinkBenchResult> RunLinkBench(const LinkBenchOptions& o, std::ostream& log) {
  if (o.rates.empty()) return Status::InvalidArgument("bench link: no rates");
  for (double r : o.rates) {
    if (!(r >= 8000)) return Status::InvalidArgument("bench link: a rate below 8 kbit/s");
  }
  if (o.tokens == 0 || o.reps == 0 || o.recompute_reps == 0) {
    return Status::InvalidArgument("bench link: tokens, reps and recompute reps must be > 0");
  }
  auto parsed = demo::ParseDemoCodecs(o.codecs);
  if (!parsed.ok()) return parsed.status();
  KVSTASH_RETURN_IF_ERROR(CheckLinkPrerequisites());
  if (auto swept = SweepStaleLinks(); swept.ok()) {
    for (const auto& n : *swept) log << "removed stale namespace " << n << "\n";
  }

  double load_start = 0;
  getloadavg(&load_start, 1);  // other work on the machine weighs on every CPU figure
  // Model, prefix, exact KV, recompute time.
  KVSTASH_ASSIGN_OR_RETURN(auto model, model::LoadModel(o.model));
  if (!model->tokenizer) return Status::InvalidArgument("the model file has no tokenizer");
  KVSTASH_ASSIGN_OR_RETURN(Digest256 fingerprint, Sha256File(o.model));
  KVSTASH_ASSIGN_OR_RETURN(auto prefix, PrefixTokens(*model, o.tokens));
  const std::vector<uint32_t>& tokens = prefix.first;
  model::KvCache exact = model::KvCache::ForModel(model->config);
  // One timed prefill of the prefix (fresh cache, last-token logits); the first is kept
  // as the exact KV.
  std::vector<double> recompute_cpu;  // process CPU ms of each prefill
  auto time_prefill = [&](bool keep) -> Result<double> {
    auto cache = model::KvCache::ForModel(model->config);
    const auto t0 = Clock::now();
    const double cpu0 = CpuMs();
    KVSTASH_RETURN_IF_ERROR(model::Prefill(*model, tokens, &cache).status());
    const double ms = Ms(t0, Clock::now());
    recompute_cpu.push_back(CpuMs() - cpu0);
    if (keep) exact = std::move(cache);
    return ms;
  };
  std::vector<double> recompute;  // every prefill of the run: the first reps, one per cell
  for (uint32_t i = 0; i < o.recompute_reps; ++i) {
    KVSTASH_ASSIGN_OR_RETURN(double ms, time_prefill(i == 0));
    recompute.push_back(ms);
  }
  log << "prefix: " << tokens.size() << " tokens of " << prefix.second << "; recompute (prefill) median "
      << Median(recompute) << " ms over " << o.recompute_reps << "\n";

  // Codecs and their chains.
  std::shared_ptr<const model::SpecPredictor> predictor;
  if (parsed->want_spec) {
    model::SpecPredictorOptions po;
    po.threads = o.predictor_threads;
    KVSTASH_ASSIGN_OR_RETURN(auto p, model::SpecPredictor::Create(*model, po));
    predictor = std::move(p);
  }
  demo::DemoArtifactOptions ao;
  ao.cache_dir = o.artifact_dir;
  KVSTASH_ASSIGN_OR_RETURN(auto artifacts, demo::LoadOrCalibrateArtifacts(*model, fingerprint, predictor.get(),
                                                                         parsed->want_spec, parsed->want_dckv, ao));
  const std::string run_id = demo::RandomHex(8);
  std::vector<StoredChain> chains;
  for (PrefixCodecKind k : parsed->kinds) {
    StoredChain c;
    c.name = PrefixCodecName(k);
    PrefixCodecOptions co;
    co.kind = k;
    co.model_fingerprint = fingerprint;
    co.chunk_tokens = o.chunk_tokens;
    co.tenant = "link";
    co.cache_salt = "link-" + run_id;
    KVSTASH_ASSIGN_OR_RETURN(c.codec, demo::MakeDemoCodec(k, *model, predictor, artifacts, co));
    KVSTASH_ASSIGN_OR_RETURN(c.keys, c.codec->ChainKeys(tokens, ChainInputs::TokensOnly()));
    PrefixEncodeStats es;
    KVSTASH_ASSIGN_OR_RETURN(c.puts, c.codec->EncodeChunks(tokens, exact, 0, &es));
    c.raw_bytes = es.raw_bytes;
    c.stored_bytes = es.stored_bytes;
    chains.push_back(std::move(c));  // PUT below, from the client namespace
  }

  // The link and the server.
  KVSTASH_ASSIGN_OR_RETURN(auto link, NetnsLink::Create());
  const fs::path tmp = fs::temp_directory_path() / ("kvstash-link-" + std::to_string(getpid()));
  demo::DemoServer server;
  demo::DemoServerOptions so;
  so.binary = o.server_bin.empty() ? (fs::read_symlink("/proc/self/exe").parent_path() / "kvstash-server").string()
                                   : o.server_bin;
  so.data_dir = tmp.string();
  so.memory_only = true;
  so.port = 7470;
  so.http_port = 7471;
  so.listen = NetnsLink::kServerAddress;
  so.launcher = link->ServerLauncher();
  so.tenant = "link";
  so.credential = demo::RandomHex(16);
  so.log_file = (tmp / "kvstash-server.log").string();
  // Slow links: whole-frame deadlines at 10 kB/s and a 10-minute I/O deadline.
  so.extra_args = {"--memory-budget", "1G", "--min-transfer-bytes-per-s", "10000", "--io-timeout-ms", "600000",
                   "--idle-timeout-ms", "3600000"};
  KVSTASH_RETURN_IF_ERROR(server.Start(so).WithContext("starting kvstash-server in " + link->server_ns()));
  log << "link: " << link->server_ns() << " (kvstash-server pid " << server.pid() << ", " << NetnsLink::kServerAddress
      << ":" << server.port() << ") <-> " << link->client_ns() << "\n";

  LinkBenchResult res;
  res.rows = nlohmann::json::array();
  Status run = link->RunInClient([&]() -> Status {
    ClientOptions copt;
    copt.servers = {std::string(NetnsLink::kServerAddress) + ":" + std::to_string(server.port())};
    copt.tenant = so.tenant;
    copt.credential = so.credential;
    copt.default_deadline = std::chrono::milliseconds(900000);
    copt.max_attempts = 1;
    copt.connect_timeout = std::chrono::milliseconds(10000);
    {  // PUT over the unshaped link
      KVSTASH_ASSIGN_OR_RETURN(auto client, Client::Create(copt));
      for (const auto& c : chains) {
        for (const auto& p : c.puts) KVSTASH_RETURN_IF_ERROR(client->Put(p).WithContext("PUT " + c.name));
      }
    }
    std::vector<double> rates = o.rates;
    std::sort(rates.rbegin(), rates.rend());
    for (double rate : rates) {
      KVSTASH_RETURN_IF_ERROR(link->Shape(rate, o.rtt_ms));
      // Fresh connections per rate: TCP's estimates (BBR's min RTT) of an earlier link
      // would otherwise throttle this one.
      KVSTASH_ASSIGN_OR_RETURN(auto client, Client::Create(copt));
      KVSTASH_RETURN_IF_ERROR(client->Ping(0).WithContext("ping"));
      for (auto& c : chains) {
        const double wire_s = static_cast<double>(c.stored_bytes) * 8 / rate;
        // Warm connections (past slow start), as a long-running engine has; skipped
        // where the wire time dwarfs a few RTTs of ramp-up.
        const bool warmup = wire_s <= kWarmupMaxWireS;
        if (warmup) KVSTASH_RETURN_IF_ERROR(RestoreOnce(client.get(), c, tokens, exact, false).status());
        const uint32_t reps = static_cast<uint32_t>(
            std::clamp<double>(std::floor(o.max_cell_s / wire_s), 1, o.reps));
        std::vector<double> lookup, get, server_get, transfer, predictor_ms, decode, restore, restore_cpu;
        uint64_t bytes = 0;
        for (uint32_t r = 0; r < reps; ++r) {
          KVSTASH_ASSIGN_OR_RETURN(RestoreTimes t, RestoreOnce(client.get(), c, tokens, exact, r == 0));
          lookup.push_back(t.lookup);
          get.push_back(t.get);
          server_get.push_back(t.server_get);
          transfer.push_back(t.get - t.server_get);
          predictor_ms.push_back(t.predictor);
          decode.push_back(t.decode);
          restore.push_back(t.lookup + t.get + t.predictor + t.decode);
          restore_cpu.push_back(t.restore_cpu);
          bytes = t.bytes;
        }
        const double restore_ms = Median(restore);
        // Recompute under the same machine load as this cell's restores.
        KVSTASH_ASSIGN_OR_RETURN(const double recompute_ms, time_prefill(false));
        recompute.push_back(recompute_ms);
        nlohmann::json row = {{"rate_bits_per_s", rate},
                              {"rate", RateName(rate)},
                              {"rtt_ms", o.rtt_ms},
                              {"codec", c.name},
                              {"tokens", tokens.size()},
                              {"chunks", c.keys.size()},
                              {"raw_bytes", c.raw_bytes},
                              {"stored_bytes", c.stored_bytes},
                              {"restored_bytes", bytes},
                              {"reps", reps},
                              {"warmup", warmup},
                              {"wire_ms", wire_s * 1000},
                              {"tbf_burst_bytes", link->burst_bytes()},
                              {"shaping", link->shaping()},
                              {"lookup_ms", Median(lookup)},
                              {"get_ms", Median(get)},
                              {"server_get_ms", Median(server_get)},
                              {"transfer_ms", Median(transfer)},
                              {"goodput_bits_per_s", static_cast<double>(bytes) * 8 / (Median(get) / 1000)},
                              {"predictor_ms", Median(predictor_ms)},
                              {"decode_ms", Median(decode)},
                              {"restore_ms", restore_ms},
                              {"recompute_ms", recompute_ms},
                              {"restore_over_recompute", restore_ms / recompute_ms},
                              {"restore_cpu_ms", Median(restore_cpu)},
                              {"recompute_cpu_ms", recompute_cpu.back()},
                              {"verified", true}};
        log << RateName(rate) << " " << c.name << ": restore " << restore_ms << " ms (get " << Median(get)
            << " ms, " << reps << " reps) vs recompute " << recompute_ms << " ms\n";
        res.rows.push_back(row);
      }
    }
    return Status::Ok();
  });
  server.Stop();
  link->Destroy();
  std::error_code ec;
  fs::remove_all(tmp, ec);
  KVSTASH_RETURN_IF_ERROR(run);

  const double recompute_ms = Median(recompute);
  // Crossover per codec (see the header).
  res.crossover = nlohmann::json::array();
  for (const auto& c : chains) {
    std::vector<nlohmann::json> mine;
    for (const auto& r : res.rows) {
      if (r["codec"] == c.name) mine.push_back(r);
    }
    // CPU parts from every cell of the codec (they do not depend on the link; the median
    // over cells damps other load on the machine); the GET's excess over the wire time
    // from the fastest rate.
    std::vector<double> cpu;
    for (const auto& r : mine) {
      cpu.push_back(r["lookup_ms"].get<double>() + r["predictor_ms"].get<double>() + r["decode_ms"].get<double>());
    }
    const auto& fast = mine.front();  // rows run fastest first
    const double fixed =
        Median(cpu) + std::max(0.0, fast["get_ms"].get<double>() - fast["wire_ms"].get<double>());
    std::vector<double> rcpu;
    for (const auto& r : mine) rcpu.push_back(r["restore_cpu_ms"].get<double>());
    nlohmann::json x = {{"codec", c.name},
                        {"restore_cpu_over_recompute_cpu", Median(rcpu) / Median(recompute_cpu)},
                        {"stored_bytes", c.stored_bytes},
                        {"recompute_ms", recompute_ms},
                        {"fixed_ms", fixed}};
    if (recompute_ms > fixed) {
      x["crossover_bits_per_s"] = static_cast<double>(c.stored_bytes) * 8 / ((recompute_ms - fixed) / 1000);
    } else {
      x["crossover_bits_per_s"] = nullptr;
      x["note"] = "restore costs more than recompute at any link speed on this machine";
    }
    // Measured: between which neighbouring rates restore - recompute changes sign.
    x["measured_between_bits_per_s"] = nullptr;
    for (size_t i = 0; i + 1 < mine.size(); ++i) {
      const bool a = mine[i]["restore_over_recompute"].get<double>() < 1;
      const bool b = mine[i + 1]["restore_over_recompute"].get<double>() < 1;
      if (a != b) {
        x["measured_between_bits_per_s"] = {mine[i + 1]["rate_bits_per_s"], mine[i]["rate_bits_per_s"]};
      }
    }
    x["restore_wins_at_bits_per_s"] = nlohmann::json::array();
    for (const auto& r : mine) {
      if (r["restore_over_recompute"].get<double>() < 1) x["restore_wins_at_bits_per_s"].push_back(r["rate_bits_per_s"]);
    }
    res.crossover.push_back(x);
  }

  utsname u{};
  uname(&u);
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  res.setup = {{"model", o.model},
               {"model_sha256", ToHex(fingerprint)},
               {"prefix_tokens", tokens.size()},
               {"prefix_source", prefix.second},
               {"chunk_tokens", o.chunk_tokens},
               {"rtt_ms", o.rtt_ms},
               {"recompute_ms", recompute_ms},
               {"recompute_reps", o.recompute_reps},
               {"recompute_note", "median of recompute_reps prefills before the link runs and one after "
                                  "every (rate, codec) cell; each row's recompute_ms is its own cell's"},
               {"recompute_all_ms", recompute},
               {"recompute_cpu_ms", Median(recompute_cpu)},
               {"reps_max", o.reps},
               {"max_cell_s", o.max_cell_s},
               {"predictor", predictor ? predictor->options().VariantName() : ""},
               {"predictor_threads", o.predictor_threads},
               {"spec_artifact", artifacts.spec_path},
               {"dckv_artifact", artifacts.dckv_path},
               {"link", "network namespaces + TUN devices (MTU 65000); rate: tbf on each device's egress; "
                        "delay: userspace delay line, RTT/2 each way (kernel lacks sch_netem); "
                        "tcp_rmem/tcp_wmem max 64 MiB in both namespaces"},
               {"server", "kvstash-server, memory tier, in the server namespace; client: one kvstash::Client "
                          "(2 pooled connections) on a thread in the client namespace"},
               {"kernel", std::string(u.sysname) + " " + u.release},
               {"cpus", std::thread::hardware_concurrency()},
               {"load_average_1m_start", load_start},
               {"load_average_1m_end", load[0]},
               {"nice", getpriority(PRIO_PROCESS, 0)},
               {"gpu", "none (CPU reference decoders and predictor)"}};
  return res;
}

}  // namespace kvstash::bench
