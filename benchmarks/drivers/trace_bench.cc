// The driver of `kvstash-bench trace` (trace_bench.h).
#include "benchmarks/drivers/trace_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <nlohmann/json.hpp>
#include <unistd.h>
#include <unordered_map>

#include "store/store.h"

#ifndef KVSTASH_SOURCE_DIR
#define KVSTASH_SOURCE_DIR "."
#endif

namespace kvstash::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct KeyHash {
  size_t operator()(const StoredKey& k) const {
    uint64_t h;
    std::memcpy(&h, k.data(), sizeof(h));  // already a SHA-256 prefix
    return static_cast<size_t>(h);
  }
};

// The namespace the bench's keys chain from (any fixed digest would do).
Digest256 TraceNamespace(uint32_t block_tokens) {
  Namespace spec;
  spec.model_fingerprint = "kvstash bench trace";
  spec.layout = {1, 1, 1, DType::kBF16};
  spec.chunk_tokens = block_tokens;
  return NamespaceDigest(spec).value();
}

Result<nlohmann::json> ReadJsonFile(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open " + path.string());
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument(path.string() + " is not JSON");
  return j;
}

// Pseudo-random bytes (SplitMix64): payload content the store never looks inside.
std::vector<uint8_t> Noise(size_t n) {
  std::vector<uint8_t> v(n);
  uint64_t s = 0x7472616365ull;
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    v[i] = static_cast<uint8_t>(z ^ (z >> 31));
  }
  return v;
}

constexpr size_t kNoiseShift = 61;  // block b's payload starts at noise[b % 61]

}  // namespace

Result<std::vector<TraceRequest>> ReadTrace(const std::string& path, uint32_t block_tokens) {
  std::ifstream in(path);
  if (!in) {
    return Status::NotFound("trace " + path +
                            " not found (the Mooncake traces live in ../shared/traces beside "
                            "the source root; see its README.md; they are never copied into "
                            "the project)");
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::InvalidArgument("trace " + path + " is not a regular file");
  }
  std::vector<TraceRequest> out;
  std::string line;
  uint64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("input_length") ||
        !j.contains("hash_ids") || !j["input_length"].is_number_unsigned() ||
        !j["hash_ids"].is_array()) {
      return Status::InvalidArgument(where + ": not a JSON object with an unsigned input_length and a "
                                     "hash_ids array");
    }
    TraceRequest r;
    r.input_length = j["input_length"].get<uint64_t>();
    for (const auto& id : j["hash_ids"]) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX) {
        return Status::InvalidArgument(where + ": hash id not in [0, 2^32)");
      }
      r.hash_ids.push_back(static_cast<uint32_t>(id.get<uint64_t>()));
    }
    const uint64_t n = r.hash_ids.size();
    if (n == 0 || r.input_length <= block_tokens * (n - 1) || r.input_length > block_tokens * n) {
      return Status::InvalidArgument(where + ": input_length " + std::to_string(r.input_length) +
                                     " does not fit " + std::to_string(n) + " blocks of " +
                                     std::to_string(block_tokens));
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) return Status::InvalidArgument("trace " + path + " has no requests");
  return out;
}

Result<TracePlan> BuildTracePlan(const std::vector<TraceRequest>& trace, uint32_t block_tokens) {
  if (block_tokens == 0) return Status::InvalidArgument("block_tokens 0");
  const Digest256 ns = TraceNamespace(block_tokens);
  TracePlan plan;
  plan.block_tokens = block_tokens;
  std::unordered_map<StoredKey, uint32_t, KeyHash> index;
  for (const TraceRequest& r : trace) {
    const size_t n = r.hash_ids.size();
    const uint32_t last_tokens =
        static_cast<uint32_t>(r.input_length - uint64_t{block_tokens} * (n - 1));
    // One "token" (the hash id) per chunk: key i chains over ids[0..i]. A partial last
    // block gets its token count as an extra key.
    std::vector<std::vector<std::string>> extra(n);
    if (last_tokens < block_tokens) extra[n - 1] = {"tokens:" + std::to_string(last_tokens)};
    KVSTASH_ASSIGN_OR_RETURN(auto keys, ComputeChunkKeys(ns, r.hash_ids, 1, false, extra));
    std::vector<uint32_t> blocks(n);
    for (size_t i = 0; i < n; ++i) {
      const StoredKey k = keys[i].stored();
      auto [it, inserted] = index.try_emplace(k, static_cast<uint32_t>(plan.keys.size()));
      if (inserted) {
        plan.keys.push_back(k);
        plan.tokens.push_back(i + 1 == n ? last_tokens : block_tokens);
        plan.parent.push_back(i == 0 ? -1 : static_cast<int32_t>(blocks[i - 1]));
      }
      blocks[i] = it->second;
    }
    plan.requests.push_back(std::move(blocks));
    plan.input_tokens += r.input_length;
  }
  return plan;
}

std::vector<uint64_t> BlockBytes(const TracePlan& plan, double bytes_per_token,
                                 uint64_t byte_scale) {
  std::vector<uint64_t> out(plan.tokens.size());
  const double scale = static_cast<double>(std::max<uint64_t>(byte_scale, 1));
  for (size_t b = 0; b < out.size(); ++b) {
    const double v = std::ceil(plan.tokens[b] * bytes_per_token / scale);
    out[b] = std::max<uint64_t>(1, static_cast<uint64_t>(v));
  }
  return out;
}

ReplayResult SimulateLru(const TracePlan& plan, const std::vector<uint64_t>& bytes,
                         uint64_t capacity_bytes) {
  const auto t0 = Clock::now();
  ReplayResult res;
  std::list<uint32_t> lru;  // front: most recently used
  std::unordered_map<uint32_t, std::list<uint32_t>::iterator> where;
  uint64_t used = 0;
  for (const auto& req : plan.requests) {
    size_t m = 0;
    while (m < req.size() && where.count(req[m])) ++m;
    for (size_t i = 0; i < m; ++i) res.hit_tokens += plan.tokens[req[i]];
    for (size_t j = req.size(); j-- > 0;) {
      const uint32_t b = req[j];
      auto it = where.find(b);
      if (it != where.end()) {
        lru.splice(lru.begin(), lru, it->second);
        continue;
      }
      if (bytes[b] > capacity_bytes) continue;
      lru.push_front(b);
      where[b] = lru.begin();
      used += bytes[b];
      while (used > capacity_bytes) {
        const uint32_t victim = lru.back();
        lru.pop_back();
        where.erase(victim);
        used -= bytes[victim];
        ++res.evictions;
      }
    }
  }
  res.seconds = Seconds(t0, Clock::now());
  return res;
}

Result<ReplayResult> ReplayStore(const TracePlan& plan, const std::vector<uint64_t>& bytes,
                                 const store::StoreOptions& options) {
  KVSTASH_ASSIGN_OR_RETURN(auto st, store::Store::Open(options));
  const uint64_t max_bytes = bytes.empty() ? 1 : *std::max_element(bytes.begin(), bytes.end());
  const std::vector<uint8_t> noise = Noise(max_bytes + kNoiseShift);
  auto payload_of = [&](uint32_t b) {
    return std::span<const uint8_t>(noise.data() + b % kNoiseShift, bytes[b]);
  };

  const auto t0 = Clock::now();
  ReplayResult res;
  std::vector<StoredKey> keys;
  std::vector<store::PutChunk> puts;
  for (const auto& req : plan.requests) {
    keys.clear();
    for (uint32_t b : req) keys.push_back(plan.keys[b]);
    KVSTASH_ASSIGN_OR_RETURN(store::LookupResult lk, st->Lookup(keys, false));
    const size_t m = lk.keys.size();
    uint64_t matched = 0;
    for (size_t i = 0; i < m; ++i) matched += plan.tokens[req[i]];
    if (matched != lk.matched_tokens) {
      return Status::Internal("Lookup matched " + std::to_string(lk.matched_tokens) +
                              " tokens, its chunks hold " + std::to_string(matched));
    }
    res.hit_tokens += matched;
    if (m > 0) {  // restore the hit: the accesses eviction counts
      KVSTASH_ASSIGN_OR_RETURN(auto got, st->Get(std::span(keys.data(), m)));
      for (size_t i = 0; i < m; ++i) {
        const auto want = payload_of(req[i]);
        const auto have = got[i].found ? got[i].payload_bytes() : std::span<const uint8_t>();
        if (!got[i].found || have.size() != want.size() ||
            std::memcmp(have.data(), want.data(), std::min<size_t>(want.size(), 64)) != 0) {
          return Status::Internal("Get of a chunk its Lookup matched missed or differs");
        }
      }
    }
    if (m == req.size()) continue;
    puts.clear();
    for (size_t i = m; i < req.size(); ++i) {
      const uint32_t b = req[i];
      store::PutChunk c;
      c.key = plan.keys[b];
      c.has_parent = i > 0;
      if (i > 0) c.parent = plan.keys[req[i - 1]];
      c.tokens = plan.tokens[b];
      c.partial = i + 1 == req.size() && plan.tokens[b] < plan.block_tokens;
      c.payload = payload_of(b);
      puts.push_back(c);
    }
    if (Status s = st->Put(puts); !s.ok()) {
      if (s.code() != Status::Code::kResourceExhausted) return s;
      ++res.put_failures;
    }
  }
  res.seconds = Seconds(t0, Clock::now());
  const store::StoreStats stats = st->Stats();
  res.evictions = stats.tiers[0].evictions + stats.tiers[1].evictions;
  return res;
}

Result<std::vector<TraceCodec>> ReadTraceCodecs(const std::string& results_dir) {
  std::vector<TraceCodec> out;
  out.push_back({"raw", 1.0, "bf16 as stored (ratio 1)"});
  const fs::path dir(results_dir);
  KVSTASH_ASSIGN_OR_RETURN(nlohmann::json spec, ReadJsonFile(dir / "bench_codec_spec.json"));
  bool found = false;
  for (const auto& r : spec.value("rows", nlohmann::json::array())) {
    if (r.value("codec", "") == "spec" && r.value("dtype", "") == "bf16" &&
        r.contains("stored_bytes") && r.contains("raw_bytes")) {
      const double f = r["stored_bytes"].get<double>() / r["raw_bytes"].get<double>();
      out.push_back({"spec", f,
                     "bench_codec_spec.json rows[codec=spec,dtype=bf16] stored_bytes/raw_bytes"});
      found = true;
      break;
    }
  }
  if (!found) return Status::NotFound("bench_codec_spec.json has no spec bf16 row");
  KVSTASH_ASSIGN_OR_RETURN(nlohmann::json dckv,
                           ReadJsonFile(dir / "bench_codec_dckv_fisher_p8.json"));
  found = false;
  for (const auto& r : dckv.value("rows", nlohmann::json::array())) {
    if (r.value("codec", "") != "dckv" || !r.contains("ratio_vs_bf16")) continue;
    const double rate = r.value("rate", 0.0);
    char name[32];
    std::snprintf(name, sizeof(name), "dckv-r%g", rate);
    out.push_back({name, 1.0 / r["ratio_vs_bf16"].get<double>(),
                   "bench_codec_dckv_fisher_p8.json rows[codec=dckv,rate=" +
                       std::string(name + 6) + "] 1/ratio_vs_bf16 (= bytes_per_token/23040)"});
    found = true;
  }
  if (!found) return Status::NotFound("bench_codec_dckv_fisher_p8.json has no dckv rows");
  return out;
}

Result<TraceBenchResult> RunTraceBench(const TraceBenchOptions& o) {
  if (o.tiers != "t0" && o.tiers != "t0t1") {
    return Status::InvalidArgument("tiers must be t0 or t0t1, not " + o.tiers);
  }
  for (double b : o.budgets) {
    if (!(b > 0 && b <= 1)) return Status::InvalidArgument("budgets are fractions in (0, 1]");
  }
  std::vector<std::string> traces = o.traces;
  const fs::path trace_dir = fs::path(KVSTASH_SOURCE_DIR) / ".." / "shared" / "traces";
  if (traces.empty()) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(trace_dir, ec)) {
      if (e.path().extension() == ".jsonl") traces.push_back(e.path().string());
    }
    std::sort(traces.begin(), traces.end());
    if (traces.empty()) {
      return Status::NotFound("no *.jsonl traces in " + trace_dir.lexically_normal().string() +
                              " (../shared/traces beside the source root: the Mooncake "
                              "FAST'25 traces; pass --trace FILE)");
    }
  }
  const std::string results_dir = o.results_dir.empty()
                                      ? std::string(KVSTASH_SOURCE_DIR) + "/benchmarks/results"
                                      : o.results_dir;
  KVSTASH_ASSIGN_OR_RETURN(auto all_codecs, ReadTraceCodecs(results_dir));
  std::vector<TraceCodec> codecs;
  for (const auto& c : all_codecs) {
    if (o.codecs.empty() || std::count(o.codecs.begin(), o.codecs.end(), c.name)) {
      codecs.push_back(c);
    }
  }
  for (const auto& name : o.codecs) {
    if (std::none_of(all_codecs.begin(), all_codecs.end(),
                     [&](const TraceCodec& c) { return c.name == name; })) {
      return Status::InvalidArgument("unknown codec " + name);
    }
  }
  const double raw_bpt =
      2.0 * o.model_layers * o.model_kv_heads * o.model_head_dim * 2.0;  // K,V x bf16

  nlohmann::json setup;
  setup["model"] = o.model;
  setup["model_kv"] = std::to_string(o.model_layers) + " layers x " +
                      std::to_string(o.model_kv_heads) + " kv heads x " +
                      std::to_string(o.model_head_dim) + " dims x 2 (K,V) x 2 bytes (bf16)";
  setup["raw_bytes_per_token"] = raw_bpt;
  setup["codec_figures_from"] =
      "measured on real SmolLM2-135M KV (committed benchmarks/results), stored/bf16 ratio "
      "applied to the named model's bf16 bytes per token";
  for (const auto& c : codecs) {
    setup["codecs"].push_back({{"name", c.name},
                               {"fraction_of_bf16", c.fraction_of_bf16},
                               {"bytes_per_token", raw_bpt * c.fraction_of_bf16},
                               {"source", c.source}});
  }
  setup["block_tokens"] = o.block_tokens;
  setup["byte_scale"] = o.byte_scale;
  setup["tiers"] = o.tiers;
  setup["budget_split"] =
      o.tiers == "t0"
          ? "all of the budget on T0 (T1, T2 off): one process, in-memory Store"
          : "budget on T1 (RocksDB, temp dir); T0 cache of t0_share x budget in front "
            "(T0 is inclusive of T1, so T1's budget decides the hit rate)";
  if (o.tiers == "t0t1") setup["t0_share"] = o.t0_share;
  setup["store"] = {{"eviction_samples", o.eviction_samples},
                    {"lfu_decay_accesses", o.lfu_decay_accesses}};
  setup["replay"] =
      "per request: Lookup(chain) -> Get(matched run) -> Put(missing tail); hit = matched "
      "tokens / input tokens";

  TraceBenchResult result;
  for (const std::string& path : traces) {
    KVSTASH_ASSIGN_OR_RETURN(auto trace, ReadTrace(path, o.block_tokens));
    if (o.max_requests && trace.size() > o.max_requests) trace.resize(o.max_requests);
    KVSTASH_ASSIGN_OR_RETURN(TracePlan plan, BuildTracePlan(trace, o.block_tokens));
    const std::vector<uint64_t> raw_bytes = BlockBytes(plan, raw_bpt, o.byte_scale);
    uint64_t raw_total = 0, distinct_tokens = 0;
    for (size_t b = 0; b < raw_bytes.size(); ++b) {
      raw_total += raw_bytes[b];
      distinct_tokens += plan.tokens[b];
    }
    const std::string name = fs::path(path).filename().string();
    setup["traces"].push_back({{"file", name},
                               {"requests", plan.requests.size()},
                               {"input_tokens", plan.input_tokens},
                               {"distinct_blocks", plan.keys.size()},
                               {"distinct_tokens", distinct_tokens},
                               {"distinct_raw_bytes", distinct_tokens * raw_bpt}});
    for (const TraceCodec& c : codecs) {
      const double bpt = raw_bpt * c.fraction_of_bf16;
      const std::vector<uint64_t> bytes = BlockBytes(plan, bpt, o.byte_scale);
      for (double budget : o.budgets) {
        const uint64_t cap = static_cast<uint64_t>(budget * static_cast<double>(raw_total));
        auto row = [&](const char* policy, const ReplayResult& r) {
          TraceBenchRow w;
          w.trace = name;
          w.codec = c.name;
          w.policy = policy;
          w.budget_fraction = budget;
          w.budget_bytes = cap;
          w.bytes_per_token = bpt;
          w.requests = plan.requests.size();
          w.input_tokens = plan.input_tokens;
          w.hit_tokens = r.hit_tokens;
          w.token_hit_rate = plan.input_tokens ? static_cast<double>(r.hit_tokens) /
                                                     static_cast<double>(plan.input_tokens)
                                               : 0;
          w.put_failures = r.put_failures;
          w.evictions = r.evictions;
          w.seconds = r.seconds;
          w.requests_per_s = r.seconds > 0 ? w.requests / r.seconds : 0;
          result.rows.push_back(w);
        };
        row("lru_sim", SimulateLru(plan, bytes, cap));
        for (auto policy : {store::EvictionPolicy::kLfuDecay, store::EvictionPolicy::kLru}) {
          store::StoreOptions so;
          so.eviction = policy;
          so.eviction_samples = o.eviction_samples;
          so.lfu_decay_accesses = o.lfu_decay_accesses;
          fs::path dir;
          if (o.tiers == "t0") {
            so.memory_budget_bytes = std::max<uint64_t>(cap, 1);
          } else {
            std::error_code ec;
            dir = fs::path(o.dir.empty() ? fs::temp_directory_path().string() : o.dir) /
                  ("kvstash-trace-" + std::to_string(::getpid()));
            fs::remove_all(dir, ec);
            so.path = dir.string();
            so.disk_budget_bytes = std::max<uint64_t>(cap, 1);
            so.memory_budget_bytes =
                std::max<uint64_t>(static_cast<uint64_t>(o.t0_share * cap), 1);
          }
          auto r = ReplayStore(plan, bytes, so);
          if (!dir.empty()) {
            std::error_code ec;
            fs::remove_all(dir, ec);
          }
          if (!r.ok()) return r.status();
          row(policy == store::EvictionPolicy::kLfuDecay ? "lfu_decay" : "lru", *r);
        }
      }
    }
  }
  result.setup_json = setup.dump();
  return result;
}

}  // namespace kvstash::bench
