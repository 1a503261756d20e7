#include "server/metrics.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <variant>
#include <vector>

namespace kvstash::server {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

constexpr int kNamedCodecs = 6;

std::string CodecName(int codec) {
  static const char* kNames[kNamedCodecs] = {"raw", "spec", "dckv", "byteplane", "kvtc", "zstd"};
  if (codec >= 0 && codec < kNamedCodecs) return kNames[codec];
  return "codec" + std::to_string(codec);
}

}  // namespace

void Metrics::RecordRequest(protocol::Opcode op, uint64_t micros, bool ok) {
  Op& o = ops_[protocol::OpcodeIndex(op)];
  o.requests.fetch_add(1, kRelaxed);
  if (!ok) o.errors.fetch_add(1, kRelaxed);
  o.latency.Record(micros);
}

void Metrics::RecordLookup(uint64_t chunks, uint64_t tokens, uint64_t hit_chunks,
                           uint64_t hit_tokens) {
  lookups_.fetch_add(1, kRelaxed);
  lookup_chunks_.fetch_add(chunks, kRelaxed);
  lookup_tokens_.fetch_add(tokens, kRelaxed);
  lookup_hit_chunks_.fetch_add(hit_chunks, kRelaxed);
  lookup_hit_tokens_.fetch_add(hit_tokens, kRelaxed);
}

void Metrics::RecordPut(uint16_t codec, uint64_t raw_bytes, uint64_t stored_bytes) {
  const int c = codec < kTrackedCodecs ? codec : kTrackedCodecs - 1;
  put_chunks_[c].fetch_add(1, kRelaxed);
  put_raw_bytes_[c].fetch_add(raw_bytes, kRelaxed);
  put_stored_bytes_[c].fetch_add(stored_bytes, kRelaxed);
}

void Metrics::RecordGetHit(uint64_t bytes) {
  get_hits_.fetch_add(1, kRelaxed);
  get_bytes_.fetch_add(bytes, kRelaxed);
}

void Metrics::RecordMemory(protocol::Opcode op, const RequestMemory& m) {
  Memory& t = op == protocol::Opcode::kPut ? put_memory_ : get_memory_;
  t.requests.fetch_add(1, kRelaxed);
  t.payload_bytes.fetch_add(m.payload_bytes, kRelaxed);
  t.raw_position_bytes.fetch_add(m.raw_position_bytes, kRelaxed);
  t.state_bytes.fetch_add(m.state_bytes, kRelaxed);
  if (m.state_bytes > 0) t.state_records.fetch_add(1, kRelaxed);
  t.total.Record(m.total());
}

TrafficTotals Metrics::Totals() const {
  TrafficTotals t;
  for (const Op& o : ops_) {
    t.requests += o.requests.load(kRelaxed);
    t.errors += o.errors.load(kRelaxed);
  }
  t.tokens_requested = lookup_tokens_.load(kRelaxed);
  t.tokens_hit = lookup_hit_tokens_.load(kRelaxed);
  for (int c = 0; c < kTrackedCodecs; ++c) {
    t.put_raw_bytes += put_raw_bytes_[c].load(kRelaxed);
    t.put_stored_bytes += put_stored_bytes_[c].load(kRelaxed);
  }
  t.get_bytes = get_bytes_.load(kRelaxed);
  return t;
}

// ---------------------------------------------------------------- rendering
// Both renderings read the same tables below, so a family is named, described and
// computed once: ScalarFamilies() (one value each), the per-codec, per-tier and
// request-memory field tables, and the two histograms. Prometheus shows every family
// with a `name`; JSON puts each value at its `json` key (under `section`, "" = top).

struct Metrics::Scalar {
  const char* name;     // Prometheus family; nullptr: JSON only
  const char* type;     // "counter" or "gauge"
  const char* help;
  const char* section;  // JSON object holding the key ("" = the document itself)
  const char* json;     // JSON key
  std::variant<uint64_t, double> value;
};

std::vector<Metrics::Scalar> Metrics::TrafficScalars() const {
  const uint64_t tokens = lookup_tokens_.load(kRelaxed), hit = lookup_hit_tokens_.load(kRelaxed);
  return {
      {"kvstash_lookups_total", "counter", "LOOKUP requests.", "lookup", "lookups", lookups_.load(kRelaxed)},
      {"kvstash_lookup_tokens_requested_total", "counter", "Tokens asked by LOOKUPs.", "lookup",
       "tokens_requested", tokens},
      {"kvstash_lookup_tokens_hit_total", "counter", "Tokens of the matched prefixes.", "lookup", "tokens_hit",
       hit},
      {"kvstash_lookup_chunks_requested_total", "counter", "Chunk keys asked by LOOKUPs.", "lookup",
       "chunks_requested", lookup_chunks_.load(kRelaxed)},
      {"kvstash_lookup_chunks_hit_total", "counter", "Chunk keys matched by LOOKUPs.", "lookup", "chunks_hit",
       lookup_hit_chunks_.load(kRelaxed)},
      {"kvstash_lookup_token_hit_rate", "gauge", "Tokens hit / tokens requested since start.", "lookup",
       "hit_rate", tokens ? static_cast<double>(hit) / tokens : 0.0},
      {"kvstash_get_hits_total", "counter", "GET requests that found their chunk.", "get", "hits",
       get_hits_.load(kRelaxed)},
      {"kvstash_get_misses_total", "counter", "GET requests that found nothing.", "get", "misses",
       get_misses_.load(kRelaxed)},
      {"kvstash_get_corrupt_total", "counter",
       "GET requests answered Corruption: a stored chunk that failed its checksum, or a payload "
       "bound to another key.",
       "get", "corrupt", get_corrupt_.load(kRelaxed)},
      {"kvstash_get_bytes_total", "counter", "Payload bytes sent by GET.", "get", "bytes",
       get_bytes_.load(kRelaxed)},
      {"kvstash_payload_rejected_total", "counter", "PUT payloads rejected by header/digest/size validation.",
       "", "payload_rejected", payload_rejected_.load(kRelaxed)},
  };
}

std::vector<Metrics::Scalar> Metrics::ServerScalars(const StoreSnapshot& store) const {
  return {
      {"kvstash_checksum_failures_total", "counter", "Stored entries dropped because a checksum failed on read.",
       "", "checksum_failures", store.checksum_failures},
      {"kvstash_pinned_entries", "gauge", "Pinned entries.", "", "pinned_entries", store.pinned_entries},
      {nullptr, "gauge", "Entries in the prefix index.", "", "index_entries", store.index_entries},
      {"kvstash_connections_open", "gauge", "Open protocol connections.", "connections", "open",
       open_.load(kRelaxed)},
      {"kvstash_connections_accepted_total", "counter", "Protocol connections accepted.", "connections",
       "accepted", accepted_.load(kRelaxed)},
      {"kvstash_connections_rejected_total", "counter", "Connections refused at the max_connections limit.",
       "connections", "rejected", rejected_.load(kRelaxed)},
      {"kvstash_bad_frames_total", "counter", "Malformed or oversized frames received.", "", "bad_frames",
       bad_frames_.load(kRelaxed)},
      {"kvstash_auth_failures_total", "counter", "HELLOs with a rejected credential.", "", "auth_failures",
       auth_failures_.load(kRelaxed)},
      {"kvstash_timeouts_total", "counter", "Connections closed by a deadline.", "", "timeouts",
       timeouts_.load(kRelaxed)},
      {"kvstash_bytes_received_total", "counter", "Protocol bytes received.", "", "bytes_received",
       bytes_in_.load(kRelaxed)},
      {"kvstash_bytes_sent_total", "counter", "Protocol bytes sent.", "", "bytes_sent", bytes_out_.load(kRelaxed)},
  };
}

namespace {

void PrometheusFamily(std::ostringstream& o, const char* name, const char* type, const char* help) {
  o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}

void PrometheusScalars(std::ostringstream& o, const std::vector<Metrics::Scalar>& scalars) {
  for (const auto& s : scalars) {
    if (s.name == nullptr) continue;
    PrometheusFamily(o, s.name, s.type, s.help);
    o << s.name << ' ';
    std::visit([&](auto v) { o << v; }, s.value);
    o << '\n';
  }
}

void JsonScalars(nlohmann::json& j, const std::vector<Metrics::Scalar>& scalars) {
  for (const auto& s : scalars) {
    nlohmann::json& at = *s.section ? j[s.section] : j;
    std::visit([&](auto v) { at[s.json] = v; }, s.value);
  }
}

// A histogram as Prometheus renders it: cumulative buckets, +Inf, sum and count, the
// bounds and the sum divided by `scale` (1e6: microseconds to seconds).
template <typename View, typename Bounds>
void PrometheusHistogram(std::ostringstream& o, const std::string& name, const std::string& label,
                         const View& v, const Bounds& bounds, double scale) {
  uint64_t cum = 0;
  for (size_t b = 0; b < bounds.size(); ++b) {
    cum += v.buckets[b];
    o << name << "_bucket{" << label << ",le=\"";
    if (scale == 1) o << bounds[b]; else o << static_cast<double>(bounds[b]) / scale;
    o << "\"} " << cum << '\n';
  }
  o << name << "_bucket{" << label << ",le=\"+Inf\"} " << v.count << '\n';
  o << name << "_sum{" << label << "} ";
  if (scale == 1) o << v.sum; else o << static_cast<double>(v.sum) / scale;
  o << '\n' << name << "_count{" << label << "} " << v.count << '\n';
}

// Per-tier fields: Prometheus family, type, help, JSON key (nullptr: Prometheus only), value.
struct TierField {
  const char* name;
  const char* type;
  const char* help;
  const char* json;
  uint64_t (*value)(const StoreSnapshot::Tier&);
};
const TierField kTierFields[] = {
    {"kvstash_tier_entries", "gauge", "Entries resident per tier.", "entries",
     [](const StoreSnapshot::Tier& t) { return t.entries; }},
    {"kvstash_tier_bytes", "gauge", "Payload + state bytes resident per tier.", "bytes",
     [](const StoreSnapshot::Tier& t) { return t.bytes; }},
    {"kvstash_tier_budget_bytes", "gauge", "Byte budget per tier.", "budget_bytes",
     [](const StoreSnapshot::Tier& t) { return t.budget_bytes; }},
    {"kvstash_tier_hits_total", "counter", "GET hits served per tier.", "hits",
     [](const StoreSnapshot::Tier& t) { return t.hits; }},
    {"kvstash_tier_evictions_total", "counter", "Entries evicted per tier.", "evictions",
     [](const StoreSnapshot::Tier& t) { return t.evictions; }},
    {"kvstash_tier_promotions_total", "counter", "Entries promoted into this tier by a hit below it.",
     "promotions", [](const StoreSnapshot::Tier& t) { return t.promotions; }},
    {"kvstash_tier_errors_total", "counter",
     "Failed operations of the engine behind each tier (RocksDB, Redis).", "errors",
     [](const StoreSnapshot::Tier& t) { return t.errors; }},
    {"kvstash_tier_up", "gauge", "1 when the tier is reachable, 0 while it is down (T2: Redis, reconnecting).",
     "up", [](const StoreSnapshot::Tier& t) { return static_cast<uint64_t>(t.up ? 1 : 0); }},
    {"kvstash_tier_writes_failing", "gauge",
     "1 while the tier's writes fail (T1: disk full or I/O error, until RocksDB resumes), else 0.",
     "writes_failing", [](const StoreSnapshot::Tier& t) { return static_cast<uint64_t>(t.writes_failing ? 1 : 0); }},
    {"kvstash_tier_needs_restart", "gauge",
     "1 while the tier takes no writes until the server restarts (T1: opened read-only on a full "
     "disk or a read-only file system, or its write-ahead log failed on a full disk), else 0.",
     nullptr, [](const StoreSnapshot::Tier& t) {
       return static_cast<uint64_t>(t.read_only || t.needs_restart ? 1 : 0);
     }},
};

}  // namespace

// Request-memory counters: Prometheus family (nullptr: JSON only), help, JSON key.
struct Metrics::MemoryField {
  const char* name;
  const char* help;
  const char* json;
  Counter Memory::*field;
};
const Metrics::MemoryField Metrics::kMemoryFields[] = {
    {nullptr, "", "requests", &Memory::requests},
    {"kvstash_request_memory_payload_bytes_total",
     "Payload bytes (header included) stored by PUT / served by GET hits.", "payload_bytes",
     &Memory::payload_bytes},
    {"kvstash_request_memory_raw_position_bytes_total",
     "Bytes of positions kept uncompressed inside those payloads (raw chunks; dckv/kvtc bf16 head and tail rows).",
     "raw_position_bytes", &Memory::raw_position_bytes},
    {"kvstash_state_bytes_total", "Recurrent-state record bytes stored by PUT (op=PUT) / served by GET (op=GET).",
     "state_bytes", &Memory::state_bytes},
    {"kvstash_state_records_total", "Recurrent-state records stored by PUT / served by GET.", "state_records",
     &Memory::state_records},
};

std::string Metrics::RenderPrometheus(const StoreSnapshot& store) const {
  std::ostringstream o;
  PrometheusFamily(o, "kvstash_requests_total", "counter", "Requests answered, by opcode.");
  for (int i = 0; i < protocol::kNumOpcodes; ++i) {
    o << "kvstash_requests_total{op=\"" << protocol::OpcodeName(i + 1) << "\"} "
      << ops_[i].requests.load(kRelaxed) << '\n';
  }
  PrometheusFamily(o, "kvstash_request_errors_total", "counter", "Requests answered with an error status.");
  for (int i = 0; i < protocol::kNumOpcodes; ++i) {
    o << "kvstash_request_errors_total{op=\"" << protocol::OpcodeName(i + 1) << "\"} "
      << ops_[i].errors.load(kRelaxed) << '\n';
  }
  PrometheusFamily(o, "kvstash_request_duration_seconds", "histogram",
                   "Time from a request's last byte read to its reply queued, by opcode.");
  for (int i = 0; i < protocol::kNumOpcodes; ++i) {
    PrometheusHistogram(o, "kvstash_request_duration_seconds",
                        "op=\"" + std::string(protocol::OpcodeName(i + 1)) + "\"", ops_[i].latency.Read(),
                        kLatencyBoundsUs, 1e6);
  }
  PrometheusScalars(o, TrafficScalars());

  PrometheusFamily(o, "kvstash_put_chunks_total", "counter", "Chunks stored by PUT, by codec.");
  PrometheusFamily(o, "kvstash_put_raw_bytes_total", "counter", "Decoded KV bytes of stored chunks, by codec.");
  PrometheusFamily(o, "kvstash_put_stored_bytes_total", "counter", "Payload bytes as stored, by codec.");
  // Every named codec from the start, at 0: a series that first appears with its
  // first PUT hides that increase from rate() (Prometheus sees no earlier sample).
  for (int c = 0; c < kTrackedCodecs; ++c) {
    if (put_chunks_[c].load(kRelaxed) == 0 && c >= kNamedCodecs) continue;
    const std::string label = "{codec=\"" + CodecName(c) + "\"} ";
    o << "kvstash_put_chunks_total" << label << put_chunks_[c].load(kRelaxed) << '\n'
      << "kvstash_put_raw_bytes_total" << label << put_raw_bytes_[c].load(kRelaxed) << '\n'
      << "kvstash_put_stored_bytes_total" << label << put_stored_bytes_[c].load(kRelaxed) << '\n';
  }

  // Request memory: PUT = stored, GET = served (docs/protocol.md §5.7).
  const std::pair<const char*, const Memory*> mem[] = {{"PUT", &put_memory_}, {"GET", &get_memory_}};
  for (const MemoryField& f : kMemoryFields) {
    if (f.name == nullptr) continue;
    PrometheusFamily(o, f.name, "counter", f.help);
    for (const auto& [op, m] : mem) o << f.name << "{op=\"" << op << "\"} " << (m->*f.field).load(kRelaxed) << '\n';
  }
  PrometheusFamily(o, "kvstash_request_memory_bytes", "histogram",
                   "Request memory = payload + state bytes, per PUT stored / GET hit served.");
  for (const auto& [op, m] : mem) {
    PrometheusHistogram(o, "kvstash_request_memory_bytes", "op=\"" + std::string(op) + "\"", m->total.Read(),
                        kMemoryBoundsBytes, 1);
  }

  for (const TierField& f : kTierFields) PrometheusFamily(o, f.name, f.type, f.help);
  for (const auto& t : store.tiers) {
    if (!t.enabled) continue;
    for (const TierField& f : kTierFields) o << f.name << "{tier=\"" << t.name << "\"} " << f.value(t) << '\n';
  }
  PrometheusScalars(o, ServerScalars(store));
  return o.str();
}

void Metrics::RenderTraffic(nlohmann::json* out) const {
  using nlohmann::json;
  json& j = *out;
  json ops = json::object();
  for (int i = 0; i < protocol::kNumOpcodes; ++i) {
    const auto v = ops_[i].latency.Read();
    ops[std::string(protocol::OpcodeName(i + 1))] = {
        {"count", ops_[i].requests.load(kRelaxed)},
        {"errors", ops_[i].errors.load(kRelaxed)},
        {"mean_us", v.count ? static_cast<double>(v.sum) / v.count : 0.0},
        {"p50_us", v.Quantile(0.50)},
        {"p90_us", v.Quantile(0.90)},
        {"p99_us", v.Quantile(0.99)}};
  }
  j["requests"] = ops;
  JsonScalars(j, TrafficScalars());
  json codecs = json::object();
  uint64_t raw_total = 0, stored_total = 0;
  for (int c = 0; c < kTrackedCodecs; ++c) {
    const uint64_t n = put_chunks_[c].load(kRelaxed);
    if (n == 0) continue;
    const uint64_t raw = put_raw_bytes_[c].load(kRelaxed), st = put_stored_bytes_[c].load(kRelaxed);
    raw_total += raw;
    stored_total += st;
    codecs[CodecName(c)] = {{"chunks", n},
                            {"raw_bytes", raw},
                            {"stored_bytes", st},
                            {"ratio", st ? static_cast<double>(raw) / st : 0.0}};
  }
  j["codecs"] = codecs;
  j["bytes_raw"] = raw_total;
  j["bytes_stored"] = stored_total;
  j["bytes_saved"] = raw_total > stored_total ? raw_total - stored_total : 0;
  auto memory = [](const Memory& m) {
    const auto v = m.total.Read();
    json r = {{"request_bytes", v.sum},
              {"mean_request_bytes", v.count ? static_cast<double>(v.sum) / v.count : 0.0},
              {"p50_request_bytes", v.Quantile(0.50)},
              {"p99_request_bytes", v.Quantile(0.99)}};
    for (const MemoryField& f : kMemoryFields) r[f.json] = (m.*f.field).load(kRelaxed);
    return r;
  };
  j["memory"] = {{"PUT", memory(put_memory_)}, {"GET", memory(get_memory_)}};
}

nlohmann::json Metrics::RenderTenantJson(const std::string& tenant,
                                         const std::string& server_id) const {
  nlohmann::json j;
  j["server_id"] = server_id;
  j["tenant"] = tenant;
  j["scope"] = "tenant";
  j["uptime_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  RenderTraffic(&j);
  return j;
}

nlohmann::json Metrics::RenderJson(const StoreSnapshot& store, const std::string& server_id) const {
  using nlohmann::json;
  json j;
  j["server_id"] = server_id;
  j["scope"] = "server";
  j["uptime_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  RenderTraffic(&j);
  json tiers = json::array();
  for (const auto& t : store.tiers) {
    json row = {{"name", t.name}, {"enabled", t.enabled}};
    for (const TierField& f : kTierFields) {
      if (f.json) row[f.json] = f.value(t);
    }
    row["up"] = t.up;
    row["writes_failing"] = t.writes_failing;
    row["read_only"] = t.read_only;
    row["read_only_filesystem"] = t.read_only_filesystem;
    row["needs_restart"] = t.needs_restart;
    row["disk_free_bytes"] = t.disk_free_bytes;
    row["free_bytes_needed"] = t.free_bytes_needed;
    tiers.push_back(std::move(row));
  }
  j["tiers"] = tiers;
  JsonScalars(j, ServerScalars(store));
  return j;
}

namespace {

// A label value as the text exposition format writes it (\\, \", \n escaped).
std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char ch : v) {
    if (ch == '\\') out += "\\\\";
    else if (ch == '"') out += "\\\"";
    else if (ch == '\n') out += "\\n";
    else out += ch;
  }
  return out;
}

}  // namespace

std::string RenderTenantPrometheus(const std::vector<std::pair<std::string, TrafficTotals>>& tenants) {
  struct Family {
    const char* name;
    const char* help;
    uint64_t TrafficTotals::*field;
  };
  static const Family kFamilies[] = {
      {"kvstash_tenant_requests_total", "Requests answered for the tenant (all opcodes).",
       &TrafficTotals::requests},
      {"kvstash_tenant_request_errors_total", "The tenant's requests answered with an error status.",
       &TrafficTotals::errors},
      {"kvstash_tenant_lookup_tokens_requested_total", "Tokens asked by the tenant's LOOKUPs.",
       &TrafficTotals::tokens_requested},
      {"kvstash_tenant_lookup_tokens_hit_total", "Tokens of the tenant's matched prefixes.",
       &TrafficTotals::tokens_hit},
      {"kvstash_tenant_put_raw_bytes_total", "Decoded KV bytes of the tenant's stored chunks.",
       &TrafficTotals::put_raw_bytes},
      {"kvstash_tenant_put_stored_bytes_total", "Payload bytes of the tenant's stored chunks, as stored.",
       &TrafficTotals::put_stored_bytes},
      {"kvstash_tenant_get_bytes_total", "Payload bytes sent to the tenant by GET hits.",
       &TrafficTotals::get_bytes},
  };
  std::ostringstream o;
  for (const Family& f : kFamilies) {
    PrometheusFamily(o, f.name, "counter", f.help);
    for (const auto& [name, t] : tenants) {
      o << f.name << "{tenant=\"" << EscapeLabelValue(name) << "\"} " << t.*f.field << '\n';
    }
  }
  return o.str();
}

}  // namespace kvstash::server
