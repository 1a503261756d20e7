#include "server/metrics.h"

#include <algorithm>
#include <chrono>
#include <sstream>

namespace kvstash::server {
namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

std::string CodecName(int codec) {
  static const char* kNames[] = {"raw", "spec", "dckv", "byteplane", "kvtc", "zstd"};
  if (codec >= 0 && codec < 6) return kNames[codec];
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

std::string Metrics::RenderPrometheus(const StoreSnapshot& store) const {
  std::ostringstream o;
  auto family = [&](const char* name, const char* type, const char* help) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  auto value = [&](const char* name, uint64_t v) { o << name << ' ' << v << '\n'; };

  family("kvstash_requests_total", "counter", "Requests answered, by opcode.");
  for (int i = 0; i < protocol::kNumOpcodes; ++i) {
    o << "kvstash_requests_total{op=\"" << protocol::OpcodeName(i + 1) << "\"} "
      << ops_[i].requests.load(kRelaxed) << '\n';
  }
  family("kvstash_request_errors_total", "counter", "Requests answered with an error status.");
  for (int i = 0; i < protocol::kNumOpcodes; ++i) {
    o << "kvstash_request_errors_total{op=\"" << protocol::OpcodeName(i + 1) << "\"} "
      << ops_[i].errors.load(kRelaxed) << '\n';
  }
  family("kvstash_request_duration_seconds", "histogram",
         "Time from a request's last byte read to its reply queued, by opcode.");
  for (int i = 0; i < protocol::kNumOpcodes; ++i) {
    const auto v = ops_[i].latency.Read();
    const std::string op(protocol::OpcodeName(i + 1));
    uint64_t cum = 0;
    for (size_t b = 0; b < kLatencyBoundsUs.size(); ++b) {
      cum += v.buckets[b];
      o << "kvstash_request_duration_seconds_bucket{op=\"" << op << "\",le=\""
        << static_cast<double>(kLatencyBoundsUs[b]) / 1e6 << "\"} " << cum << '\n';
    }
    o << "kvstash_request_duration_seconds_bucket{op=\"" << op << "\",le=\"+Inf\"} "
      << v.count << '\n';
    o << "kvstash_request_duration_seconds_sum{op=\"" << op << "\"} "
      << static_cast<double>(v.sum) / 1e6 << '\n';
    o << "kvstash_request_duration_seconds_count{op=\"" << op << "\"} " << v.count << '\n';
  }

  family("kvstash_lookups_total", "counter", "LOOKUP requests.");
  value("kvstash_lookups_total", lookups_.load(kRelaxed));
  family("kvstash_lookup_tokens_requested_total", "counter", "Tokens asked by LOOKUPs.");
  value("kvstash_lookup_tokens_requested_total", lookup_tokens_.load(kRelaxed));
  family("kvstash_lookup_tokens_hit_total", "counter", "Tokens of the matched prefixes.");
  value("kvstash_lookup_tokens_hit_total", lookup_hit_tokens_.load(kRelaxed));
  family("kvstash_lookup_chunks_requested_total", "counter", "Chunk keys asked by LOOKUPs.");
  value("kvstash_lookup_chunks_requested_total", lookup_chunks_.load(kRelaxed));
  family("kvstash_lookup_chunks_hit_total", "counter", "Chunk keys matched by LOOKUPs.");
  value("kvstash_lookup_chunks_hit_total", lookup_hit_chunks_.load(kRelaxed));
  family("kvstash_lookup_token_hit_rate", "gauge", "Tokens hit / tokens requested since start.");
  const uint64_t req_tokens = lookup_tokens_.load(kRelaxed);
  o << "kvstash_lookup_token_hit_rate "
    << (req_tokens ? static_cast<double>(lookup_hit_tokens_.load(kRelaxed)) / req_tokens : 0.0)
    << '\n';

  family("kvstash_put_chunks_total", "counter", "Chunks stored by PUT, by codec.");
  family("kvstash_put_raw_bytes_total", "counter", "Decoded KV bytes of stored chunks, by codec.");
  family("kvstash_put_stored_bytes_total", "counter", "Payload bytes as stored, by codec.");
  for (int c = 0; c < kTrackedCodecs; ++c) {
    if (put_chunks_[c].load(kRelaxed) == 0) continue;
    const std::string label = "{codec=\"" + CodecName(c) + "\"} ";
    o << "kvstash_put_chunks_total" << label << put_chunks_[c].load(kRelaxed) << '\n'
      << "kvstash_put_raw_bytes_total" << label << put_raw_bytes_[c].load(kRelaxed) << '\n'
      << "kvstash_put_stored_bytes_total" << label << put_stored_bytes_[c].load(kRelaxed)
      << '\n';
  }
  family("kvstash_get_hits_total", "counter", "GET requests that found their chunk.");
  value("kvstash_get_hits_total", get_hits_.load(kRelaxed));
  family("kvstash_get_misses_total", "counter", "GET requests that found nothing.");
  value("kvstash_get_misses_total", get_misses_.load(kRelaxed));
  family("kvstash_get_bytes_total", "counter", "Payload bytes sent by GET.");
  value("kvstash_get_bytes_total", get_bytes_.load(kRelaxed));

  // Request memory: PUT = stored, GET = served (docs/protocol.md §5.7).
  const std::pair<const char*, const Memory*> mem[] = {{"PUT", &put_memory_},
                                                       {"GET", &get_memory_}};
  auto mem_counter = [&](const char* name, const char* help, Counter Memory::*field) {
    family(name, "counter", help);
    for (const auto& [op, m] : mem) {
      o << name << "{op=\"" << op << "\"} " << (m->*field).load(kRelaxed) << '\n';
    }
  };
  mem_counter("kvstash_request_memory_payload_bytes_total",
              "Payload bytes (header included) stored by PUT / served by GET hits.",
              &Memory::payload_bytes);
  mem_counter("kvstash_request_memory_raw_position_bytes_total",
              "Bytes of positions kept uncompressed inside those payloads (raw chunks; "
              "dckv/kvtc bf16 head and tail rows).",
              &Memory::raw_position_bytes);
  mem_counter("kvstash_state_bytes_total",
              "Recurrent-state record bytes stored by PUT (op=PUT) / served by GET (op=GET).",
              &Memory::state_bytes);
  mem_counter("kvstash_state_records_total",
              "Recurrent-state records stored by PUT / served by GET.", &Memory::state_records);
  family("kvstash_request_memory_bytes", "histogram",
         "Request memory = payload + state bytes, per PUT stored / GET hit served.");
  for (const auto& [op, m] : mem) {
    const auto v = m->total.Read();
    uint64_t cum = 0;
    for (size_t b = 0; b < kMemoryBoundsBytes.size(); ++b) {
      cum += v.buckets[b];
      o << "kvstash_request_memory_bytes_bucket{op=\"" << op << "\",le=\""
        << kMemoryBoundsBytes[b] << "\"} " << cum << '\n';
    }
    o << "kvstash_request_memory_bytes_bucket{op=\"" << op << "\",le=\"+Inf\"} " << v.count
      << '\n';
    o << "kvstash_request_memory_bytes_sum{op=\"" << op << "\"} " << v.sum << '\n';
    o << "kvstash_request_memory_bytes_count{op=\"" << op << "\"} " << v.count << '\n';
  }

  family("kvstash_tier_entries", "gauge", "Entries resident per tier.");
  family("kvstash_tier_bytes", "gauge", "Payload + state bytes resident per tier.");
  family("kvstash_tier_budget_bytes", "gauge", "Byte budget per tier.");
  family("kvstash_tier_hits_total", "counter", "GET hits served per tier.");
  family("kvstash_tier_evictions_total", "counter", "Entries evicted per tier.");
  family("kvstash_tier_up", "gauge",
         "1 when the tier is reachable, 0 while it is down (T2: Redis, reconnecting).");
  for (const auto& t : store.tiers) {
    if (!t.enabled) continue;
    const std::string label = "{tier=\"" + t.name + "\"} ";
    o << "kvstash_tier_entries" << label << t.entries << '\n'
      << "kvstash_tier_bytes" << label << t.bytes << '\n'
      << "kvstash_tier_budget_bytes" << label << t.budget_bytes << '\n'
      << "kvstash_tier_hits_total" << label << t.hits << '\n'
      << "kvstash_tier_evictions_total" << label << t.evictions << '\n'
      << "kvstash_tier_up" << label << (t.up ? 1 : 0) << '\n';
  }
  family("kvstash_checksum_failures_total", "counter",
         "Stored entries dropped because a checksum failed on read.");
  value("kvstash_checksum_failures_total", store.checksum_failures);
  family("kvstash_payload_rejected_total", "counter",
         "PUT payloads rejected by header/digest/size validation.");
  value("kvstash_payload_rejected_total", payload_rejected_.load(kRelaxed));
  family("kvstash_pinned_entries", "gauge", "Pinned entries.");
  value("kvstash_pinned_entries", store.pinned_entries);

  family("kvstash_connections_open", "gauge", "Open protocol connections.");
  value("kvstash_connections_open", open_.load(kRelaxed));
  family("kvstash_connections_accepted_total", "counter", "Protocol connections accepted.");
  value("kvstash_connections_accepted_total", accepted_.load(kRelaxed));
  family("kvstash_connections_rejected_total", "counter",
         "Connections refused at the max_connections limit.");
  value("kvstash_connections_rejected_total", rejected_.load(kRelaxed));
  family("kvstash_bad_frames_total", "counter", "Malformed or oversized frames received.");
  value("kvstash_bad_frames_total", bad_frames_.load(kRelaxed));
  family("kvstash_auth_failures_total", "counter", "HELLOs with a rejected credential.");
  value("kvstash_auth_failures_total", auth_failures_.load(kRelaxed));
  family("kvstash_timeouts_total", "counter", "Connections closed by a deadline.");
  value("kvstash_timeouts_total", timeouts_.load(kRelaxed));
  family("kvstash_bytes_received_total", "counter", "Protocol bytes received.");
  value("kvstash_bytes_received_total", bytes_in_.load(kRelaxed));
  family("kvstash_bytes_sent_total", "counter", "Protocol bytes sent.");
  value("kvstash_bytes_sent_total", bytes_out_.load(kRelaxed));
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
  const uint64_t tokens = lookup_tokens_.load(kRelaxed), hit = lookup_hit_tokens_.load(kRelaxed);
  j["lookup"] = {{"lookups", lookups_.load(kRelaxed)},
                 {"chunks_requested", lookup_chunks_.load(kRelaxed)},
                 {"chunks_hit", lookup_hit_chunks_.load(kRelaxed)},
                 {"tokens_requested", tokens},
                 {"tokens_hit", hit},
                 {"hit_rate", tokens ? static_cast<double>(hit) / tokens : 0.0}};
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
  j["get"] = {{"hits", get_hits_.load(kRelaxed)},
              {"misses", get_misses_.load(kRelaxed)},
              {"bytes", get_bytes_.load(kRelaxed)}};
  j["payload_rejected"] = payload_rejected_.load(kRelaxed);
  auto memory = [](const Memory& m) {
    const auto v = m.total.Read();
    return nlohmann::json{
        {"requests", m.requests.load(kRelaxed)},
        {"payload_bytes", m.payload_bytes.load(kRelaxed)},
        {"raw_position_bytes", m.raw_position_bytes.load(kRelaxed)},
        {"state_bytes", m.state_bytes.load(kRelaxed)},
        {"state_records", m.state_records.load(kRelaxed)},
        {"request_bytes", v.sum},
        {"mean_request_bytes", v.count ? static_cast<double>(v.sum) / v.count : 0.0},
        {"p50_request_bytes", v.Quantile(0.50)},
        {"p99_request_bytes", v.Quantile(0.99)}};
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
  j["connections"] = {{"open", open_.load(kRelaxed)},
                      {"accepted", accepted_.load(kRelaxed)},
                      {"rejected", rejected_.load(kRelaxed)}};
  RenderTraffic(&j);
  json tiers = json::array();
  for (const auto& t : store.tiers) {
    tiers.push_back({{"name", t.name}, {"enabled", t.enabled}, {"entries", t.entries},
                     {"bytes", t.bytes}, {"budget_bytes", t.budget_bytes}, {"hits", t.hits},
                     {"evictions", t.evictions}, {"promotions", t.promotions}, {"up", t.up}});
  }
  j["tiers"] = tiers;
  j["checksum_failures"] = store.checksum_failures;
  j["pinned_entries"] = store.pinned_entries;
  j["index_entries"] = store.index_entries;
  j["bad_frames"] = bad_frames_.load(kRelaxed);
  j["auth_failures"] = auth_failures_.load(kRelaxed);
  j["timeouts"] = timeouts_.load(kRelaxed);
  j["bytes_received"] = bytes_in_.load(kRelaxed);
  j["bytes_sent"] = bytes_out_.load(kRelaxed);
  return j;
}

}  // namespace kvstash::server
