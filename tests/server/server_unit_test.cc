// Server parts without sockets: config loading, tenants, metrics, request handler
// (over the in-memory ChunkStore).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "common/byte_io.h"
#include "common/checksum.h"
#include "protocol/messages.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/payload_memory.h"
#include "server/request_handler.h"
#include "server/stats_history.h"
#include "server/tenant_codecs.h"
#include "server/tenants.h"
#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/server/memory_chunk_store.h"
#include "tests/server/test_payloads.h"
#include "tests/support/test_util.h"

namespace kvstash::server {
namespace {

using protocol::Frame;
using protocol::Opcode;
using testing::Bound;
using testing::Key;
using testing::RawPayload;

TEST(ConfigTest, ParsesEveryFieldAndKeepsDefaults) {
  auto doc = nlohmann::json::parse(R"({
    "listen": "0.0.0.0", "port": 9000, "http_port": 9001, "server_id": "n1",
    "io_threads": 3, "worker_threads": 4,
    "limits": {"max_frame_bytes": 2048, "max_in_flight": 8, "idle_timeout_ms": 100},
    "tenants": [{"name": "a", "credential": "x"},
                {"name": "b", "credential_sha256": "ff492ef788c89b555e6f738b33d2422f57dbb6656af2402155672c5f123a90af"}],
    "store": {"memory_budget_bytes": 1000}, "ready_file": "/tmp/r", "history_points": 60})");
  ASSERT_OK_AND_ASSIGN(ServerConfig c, ParseServerConfig(doc));
  ASSERT_OK(c.Validate());
  EXPECT_EQ(c.port, 9000);
  EXPECT_EQ(c.http_port, 9001);
  EXPECT_EQ(c.io_threads, 3u);
  EXPECT_EQ(c.limits.max_frame_bytes, 2048u);
  EXPECT_EQ(c.limits.max_in_flight, 8u);
  EXPECT_EQ(c.limits.idle_timeout_ms, 100u);
  EXPECT_EQ(c.limits.io_timeout_ms, 10000u);  // default kept
  EXPECT_EQ(c.tenants.size(), 2u);
  EXPECT_EQ(c.store["memory_budget_bytes"], 1000);
  EXPECT_EQ(c.history_points, 60u);
  EXPECT_EQ(c.history_interval_ms, 5000u);  // default kept
  // The HTTP port stays on loopback whatever `listen` is, unless set on its own.
  EXPECT_EQ(c.listen, "0.0.0.0");
  EXPECT_EQ(c.http_listen, "127.0.0.1");
  doc["http_listen"] = "::1";
  ASSERT_OK_AND_ASSIGN(c, ParseServerConfig(doc));
  EXPECT_EQ(c.http_listen, "::1");
  ASSERT_OK(c.Validate());
  c.http_listen = "localhost";  // an IP literal is required
  EXPECT_STATUS(c.Validate(), kInvalidArgument);
}

TEST(ConfigTest, ByteSizesTakeBinaryAndDecimalSuffixes) {
  const std::pair<const char*, uint64_t> ok[] = {
      {"0", 0}, {"1", 1}, {"68719476736", 68719476736ull}, {"1B", 1}, {"64K", 64ull << 10},
      {"64KiB", 64ull << 10}, {"64KB", 64000}, {"3G", 3ull << 30}, {"512MiB", 512ull << 20},
      {"2MB", 2000000}, {"1T", 1ull << 40}, {"5TB", 5000000000000ull},
      {"18446744073709551615", ~0ull}, {"16777215T", 16777215ull << 40}};
  for (const auto& [text, want] : ok) {
    ASSERT_OK_AND_ASSIGN(uint64_t got, ParseByteSize(text));
    EXPECT_EQ(got, want) << text;
  }
  for (const char* bad : {"", "G", "-1", "1.5G", "12X", "1 G", "1g", "64KiBB",
                          "18446744073709551616", "16777216T", "99999999999999999999999"}) {
    EXPECT_STATUS(ParseByteSize(bad), kInvalidArgument) << bad;
  }
}

TEST(ConfigTest, RejectsTyposAndBadValues) {
  EXPECT_STATUS(ParseServerConfig(nlohmann::json::parse(R"({"prot": 1})")), kInvalidArgument);
  EXPECT_STATUS(ParseServerConfig(nlohmann::json::parse(R"({"port": 70000})")), kInvalidArgument);
  EXPECT_STATUS(ParseServerConfig(nlohmann::json::parse(R"({"port": "1"})")), kInvalidArgument);
  EXPECT_STATUS(ParseServerConfig(nlohmann::json::parse(R"({"limits": {"max_inflight": 1}})")),
                kInvalidArgument);
  ServerConfig c;
  EXPECT_STATUS(c.Validate(), kInvalidArgument);  // no tenants
  c.tenants = {{"a", "x", ""}};
  c.http_port = c.port;  // one port for both listeners on the same address
  EXPECT_STATUS(c.Validate(), kInvalidArgument);
  c.http_listen = "127.0.0.2";
  c.listen = "0.0.0.0";  // covers 127.0.0.2 too
  EXPECT_STATUS(c.Validate(), kInvalidArgument);
  c.listen = "127.0.0.1";  // two addresses, one port each: fine
  ASSERT_OK(c.Validate());
  c = ServerConfig{};
  c.tenants = {{"a", "x", ""}, {"a", "y", ""}};
  EXPECT_STATUS(c.Validate(), kInvalidArgument);  // duplicate
  c.tenants = {{"a", "x", "ab"}};
  EXPECT_STATUS(c.Validate(), kInvalidArgument);  // both forms
  c.tenants = {{"a", "", "zz"}};
  EXPECT_STATUS(c.Validate(), kInvalidArgument);  // bad hex
  for (const char* bad : {"bad\xffutf", "ctl\nname", "nul\x01", "over\xc0\xafl", "sur\xed\xa0\x80",
                          "cut\xe2\x82"}) {
    c.tenants = {{bad, "x", ""}};
    EXPECT_STATUS(c.Validate(), kInvalidArgument) << bad;  // not printable UTF-8
  }
  c.tenants = {{"\xc3\xa9quipe-\xe2\x82\xac-\xf0\x9f\x98\x80 b", "x", ""}};  // é, €, U+1F600, space
  ASSERT_OK(c.Validate());
  c.tenants = {{"a", "x", ""}};
  ASSERT_OK(c.Validate());
  for (const char* bad : {"bad\xff\xfeid", "ctl\nid"}) {
    c.server_id = bad;
    EXPECT_STATUS(c.Validate(), kInvalidArgument) << bad;  // STATS aborted the server on it
  }
  c.server_id = "n\xc3\xa9-1";
  ASSERT_OK(c.Validate());
  c.history_points = 0;
  EXPECT_STATUS(c.Validate(), kInvalidArgument);  // history needs a point
  c.history_points = 720;
  c.history_interval_ms = 10;
  EXPECT_STATUS(c.Validate(), kInvalidArgument);  // sampling faster than 100 ms
  c.history_interval_ms = 0;
  ASSERT_OK(c.Validate());                        // 0: no history
  for (auto [io, workers] : {std::pair{0u, 2u}, {2u, 0u}, {1025u, 2u}, {2u, 40000u}}) {
    c.io_threads = io;
    c.worker_threads = workers;
    EXPECT_STATUS(c.Validate(), kInvalidArgument) << io << " " << workers;  // 1..1024 each
  }
  c.io_threads = c.worker_threads = ServerConfig::kMaxThreads;
  ASSERT_OK(c.Validate());
  c.io_threads = c.worker_threads = 2;
  c.tls_cert_file = "cert.pem";
  EXPECT_STATUS(c.Validate(), kInvalidArgument);  // cert without key
  EXPECT_STATUS(LoadServerConfig("/nonexistent/kvstash.json"), kIOError);
}

TEST(TenantsTest, AuthenticatesInClearAndByDigest) {
  // SHA-256("secret-b") computed independently (coreutils sha256sum).
  ASSERT_OK_AND_ASSIGN(
      TenantTable t,
      TenantTable::Create({{"a", "secret-a", ""},
                           {"b", "", "ff492ef788c89b555e6f738b33d2422f57dbb6656af2402155672c5f123a90af"}}));
  EXPECT_OK(t.Authenticate("a", "secret-a"));
  EXPECT_STATUS(t.Authenticate("a", "secret-b"), kPermissionDenied);
  EXPECT_STATUS(t.Authenticate("a", ""), kPermissionDenied);
  EXPECT_STATUS(t.Authenticate("c", "secret-a"), kPermissionDenied);
  EXPECT_EQ(ToHex(Sha256("secret-b")),
            "ff492ef788c89b555e6f738b33d2422f57dbb6656af2402155672c5f123a90af");
  EXPECT_OK(t.Authenticate("b", "secret-b"));
}

TEST(TenantsTest, ScopedKeysDifferPerTenantAndAreStable) {
  const StoredKey k = Key(1);
  EXPECT_NE(ScopeKey("a", k), ScopeKey("b", k));
  EXPECT_NE(ScopeKey("a", k), ScopeKey("a", Key(2)));
  EXPECT_EQ(ScopeKey("a", k), ScopeKey("a", k));
  // Length prefix: tenant "ab" + key != tenant "a" + ("b" || key[0..14]).
  EXPECT_NE(ScopeKey("ab", k), ScopeKey("a", k));
}

TEST(TenantsTest, ScopedKeysMatchTheDocumentedDigest) {
  // docs/protocol.md §5.1, recomputed with the one-shot Sha256 (an independent path
  // from ScopeKey's reused EVP context), on several threads: stored keys of existing
  // stores must never change.
  auto reference = [](const std::string& tenant, const StoredKey& key) {
    std::string buf = "kvstash.tenant-key.v1";
    buf.push_back(static_cast<char>(tenant.size()));
    buf += tenant;
    buf.append(reinterpret_cast<const char*>(key.data()), key.size());
    const Digest256 d = Sha256(buf);
    StoredKey out{};
    std::copy(d.begin(), d.begin() + out.size(), out.begin());
    return out;
  };
  const std::string long_tenant(255, 't');
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t i = 0; i < 200; ++i) {
        for (const std::string& tenant : {std::string("a"), std::string("team-b"), long_tenant}) {
          if (ScopeKey(tenant, Key(i + 1000 * t)) != reference(tenant, Key(i + 1000 * t))) {
            mismatches++;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  // A fixed value (Python: hashlib.sha256(b"kvstash.tenant-key.v1" + b"\x01a" +
  // bytes(16)).hexdigest()[:32]), so that a change of the scheme cannot pass unnoticed.
  EXPECT_EQ(ToHex(ScopeKey("a", StoredKey{})), "f9cb916e93fff69e14ff4fbe30edfa32");
}

TEST(MetricsTest, HistogramQuantilesInterpolateInsideBuckets) {
  LatencyHistogram h;
  // 100 samples: 50 at 30us (bucket (25,50]), 50 at 150us (bucket (100,200]).
  for (int i = 0; i < 50; ++i) h.Record(30);
  for (int i = 0; i < 50; ++i) h.Record(150);
  auto v = h.Read();
  EXPECT_EQ(v.count, 100u);
  EXPECT_EQ(v.sum, 50u * 30 + 50u * 150);
  EXPECT_DOUBLE_EQ(v.Quantile(0.5), 50.0);   // rank 50 = top of the first bucket
  EXPECT_DOUBLE_EQ(v.Quantile(0.75), 150.0); // halfway through (100,200]
  EXPECT_DOUBLE_EQ(v.Quantile(0.25), 37.5);  // halfway through (25,50]
  EXPECT_DOUBLE_EQ(LatencyHistogram().Read().Quantile(0.5), 0.0);
  // Clamped to the recorded range: interpolation alone gives 198 for p99.
  EXPECT_EQ(v.min, 30u);
  EXPECT_EQ(v.max, 150u);
  EXPECT_DOUBLE_EQ(v.Quantile(0.99), 150.0);
  LatencyHistogram one;
  one.Record(34);  // interpolation would say 37.5 (p50) and 49.75 (p99)
  EXPECT_DOUBLE_EQ(one.Read().Quantile(0.5), 34.0);
  EXPECT_DOUBLE_EQ(one.Read().Quantile(0.99), 34.0);
}

TEST(MetricsTest, PrometheusAndJsonAgree) {
  Metrics m;
  m.RecordRequest(Opcode::kLookup, 120, true);
  m.RecordRequest(Opcode::kGet, 80, false);
  m.RecordLookup(4, 1024, 3, 768);
  m.RecordPut(0, 4096, 4096 + 136);
  const std::string text = m.RenderPrometheus(StoreSnapshot{});
  EXPECT_NE(text.find("kvstash_requests_total{op=\"LOOKUP\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("kvstash_request_errors_total{op=\"GET\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("kvstash_lookup_tokens_hit_total 768\n"), std::string::npos);
  EXPECT_NE(text.find("kvstash_lookup_token_hit_rate 0.75\n"), std::string::npos);
  EXPECT_NE(text.find("kvstash_put_raw_bytes_total{codec=\"raw\"} 4096\n"), std::string::npos);
  // Codecs without a PUT yet are there at 0 (rate() must see their first increase).
  EXPECT_NE(text.find("kvstash_put_chunks_total{codec=\"dckv\"} 0\n"), std::string::npos);
  EXPECT_EQ(text.find("codec=\"codec6\""), std::string::npos);
  EXPECT_NE(text.find("kvstash_request_duration_seconds_bucket{op=\"LOOKUP\",le=\"0.0002\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("kvstash_request_duration_seconds_bucket{op=\"LOOKUP\",le=\"0.0001\"} 0\n"),
            std::string::npos);
  auto j = m.RenderJson(StoreSnapshot{}, "n1");
  EXPECT_EQ(j["lookup"]["tokens_hit"], 768);
  EXPECT_DOUBLE_EQ(j["lookup"]["hit_rate"].get<double>(), 0.75);
  EXPECT_EQ(j["codecs"]["raw"]["stored_bytes"], 4232);
  EXPECT_EQ(j["requests"]["GET"]["errors"], 1);
}

TEST(MetricsTest, TenantFamiliesEscapeLabelValues) {
  TrafficTotals t;
  t.tokens_requested = 10;
  t.tokens_hit = 4;
  EXPECT_DOUBLE_EQ(t.hit_rate(), 0.4);
  EXPECT_DOUBLE_EQ(TrafficTotals{}.hit_rate(), 0.0);
  const std::string text = RenderTenantPrometheus({{"plain", t}, {"we\"ird\\na\nme", t}});
  EXPECT_NE(text.find("kvstash_tenant_lookup_tokens_hit_total{tenant=\"plain\"} 4\n"), std::string::npos);
  // The exposition format's escapes: \" for a quote, \\ for a backslash, \n for a newline.
  EXPECT_NE(text.find("kvstash_tenant_lookup_tokens_requested_total{tenant=\"we\\\"ird\\\\na\\nme\"} 10\n"),
            std::string::npos)
      << text;
  // 7 families, each with HELP, TYPE and one line per tenant.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 7 * (2 + 2));
}

TEST(StatsHistoryTest, KeepsTheNewestSamplesOfTheHeadlineNumbers) {
  StatsHistory h(2, 5000);
  auto stats = [](uint64_t asked, uint64_t hit) {
    return nlohmann::json{
        {"lookup", {{"tokens_requested", asked}, {"tokens_hit", hit}}},
        {"requests", {{"GET", {{"count", 3}, {"errors", 1}}}, {"PUT", {{"count", 4}, {"errors", 0}}}}},
        {"bytes_raw", 900}, {"bytes_stored", 300}, {"bytes_saved", 600},
        {"tiers", {{{"name", "T0"}, {"enabled", true}, {"bytes", 10}, {"budget_bytes", 100}, {"entries", 2}},
                   {{"name", "T1"}, {"enabled", false}, {"bytes", 0}, {"budget_bytes", 0}, {"entries", 0}}}},
        {"tenants", {{"a", {{"tokens_requested", asked}, {"tokens_hit", hit}, {"requests", 7}, {"errors", 1}}}}}};
  };
  h.Record(1000, stats(10, 5));
  h.Record(6000, stats(20, 15));
  h.Record(11000, stats(40, 35));
  EXPECT_EQ(h.size(), 2u);
  const auto doc = h.Render();
  EXPECT_EQ(doc["interval_ms"], 5000);
  EXPECT_EQ(doc["capacity"], 2);
  ASSERT_EQ(doc["samples"].size(), 2u);
  const auto& s = doc["samples"][0];  // the first sample was dropped
  EXPECT_EQ(s["t_ms"], 6000);
  EXPECT_EQ(s["tokens_requested"], 20);
  EXPECT_EQ(s["tokens_hit"], 15);
  EXPECT_EQ(s["requests"], 7);  // summed over opcodes
  EXPECT_EQ(s["errors"], 1);
  EXPECT_EQ(s["bytes_saved"], 600);
  EXPECT_EQ(s["tiers"].size(), 1u);  // enabled tiers only
  EXPECT_EQ(s["tiers"]["T0"]["budget_bytes"], 100);
  EXPECT_EQ(s["tenants"]["a"]["tokens_hit"], 15);
  EXPECT_EQ(doc["samples"][1]["tokens_requested"], 40);
  // Missing fields read as 0 (an empty document is a valid sample).
  h.Record(12000, nlohmann::json::object());
  EXPECT_EQ(h.Render()["samples"][1]["tokens_requested"], 0);
  EXPECT_TRUE(h.Render()["samples"][1]["tenants"].empty());
}

// A hand-built payload of `codec` over SmallLayout (128 bytes per bf16 position):
// `tokens` tokens, body = `body` (its digests made to match).
std::vector<uint8_t> PayloadWithBody(CodecId codec, uint32_t tokens, std::vector<uint8_t> body) {
  PayloadHeader h{.codec = codec, .flags = kPayloadFlagLossy, .layout = testing::SmallLayout(),
                  .tokens = tokens};
  return BuildPayload(h, body).value();
}

// A dckv body: DCKB, head, tail, coded, flags, [u16 ids], raw rows, `stream` bytes.
std::vector<uint8_t> DckvBody(uint32_t head, uint32_t tail, uint32_t coded, bool ids,
                              size_t raw_row_bytes, size_t stream) {
  std::vector<uint8_t> b;
  ByteWriter w(&b);
  w.U32(0x424B4344);
  w.U32(head);
  w.U32(tail);
  w.U32(coded);
  w.U32(ids ? 1 : 0);
  if (ids) for (uint32_t i = 0; i < coded; ++i) w.U16(static_cast<uint16_t>(i));
  b.resize(b.size() + (head + tail) * raw_row_bytes + stream, 0x5a);
  return b;
}

// The hybrid state record of the tests: one f32 [2, 2] tensor named "layers.0.state".
// Hand-derived size: 64 header + (2 name_len + 14 name + 1 dtype + 1 rank + 2 * 8 dims +
// 8 data_bytes + 16 data) + 8 trailer = 130 bytes.
std::vector<uint8_t> SmallStateRecord() {
  RecurrentState st;
  st.boundary_tokens = 16;
  st.tensors.push_back({"layers.0.state", DType::kF32, {2, 2}, std::vector<uint8_t>(16, 7)});
  return EncodeStateRecord(st, Digest256{}).value();
}

TEST(PayloadMemoryTest, RawChunkIsAllUncompressedPositions) {
  // 16 tokens x (2 layers x 2 (K, V) x 2 heads x 8 dims) x 2 bytes = 2048 body bytes.
  ASSERT_OK_AND_ASSIGN(PayloadMemory m, MeasurePayload(RawPayload(16, 1)));
  EXPECT_EQ(m.payload_bytes, 136u + 2048);
  EXPECT_EQ(m.raw_positions, 16u);
  EXPECT_EQ(m.raw_position_bytes, 2048u);
  // fp8: the positions are 1 byte per scalar; the 2 x 2 fp32 scales are not positions.
  const KvLayout fp8{2, 2, 8, DType::kFP8E4M3};
  PayloadHeader h{.codec = CodecId::kRaw, .layout = fp8, .tokens = 5};
  ASSERT_OK_AND_ASSIGN(m, MeasurePayload(BuildPayload(h, std::vector<uint8_t>(5 * 64 + 16, 1)).value()));
  EXPECT_EQ(m.raw_positions, 5u);
  EXPECT_EQ(m.raw_position_bytes, 5u * 64);
  EXPECT_EQ(m.payload_bytes, 136u + 5 * 64 + 4 * 4);
}

TEST(PayloadMemoryTest, DckvAndKvtcCountTheirBf16HeadAndTailRows) {
  // dckv, 16 tokens: 4 head + 3 tail rows raw, 9 coded with u16 ids, 50 stream bytes.
  // Body 20 + 18 + 7 x 128 + 50 = 984; payload 1120; raw 896 bytes.
  std::vector<uint8_t> p = PayloadWithBody(CodecId::kDckv, 16, DckvBody(4, 3, 9, true, 128, 50));
  ASSERT_OK_AND_ASSIGN(PayloadMemory m, MeasurePayload(p));
  EXPECT_EQ(m.payload_bytes, 1120u);
  EXPECT_EQ(m.raw_positions, 7u);
  EXPECT_EQ(m.raw_position_bytes, 896u);
  // A chunk in the middle of a prefix: no raw rows.
  ASSERT_OK_AND_ASSIGN(m, MeasurePayload(PayloadWithBody(CodecId::kDckv, 1,
                                                         DckvBody(0, 0, 1, false, 128, 3))));
  EXPECT_EQ(m.raw_positions, 0u);
  EXPECT_EQ(m.raw_position_bytes, 0u);
  EXPECT_EQ(m.payload_bytes, 136u + 20 + 3);
  // kvtc: u32 head, tail, coded, raw rows, u64 packed bytes, zstd frame.
  std::vector<uint8_t> kb;
  ByteWriter w(&kb);
  w.U32(2);
  w.U32(5);
  w.U32(1);
  kb.resize(kb.size() + 7 * 128, 1);
  w.U64(4);
  kb.resize(kb.size() + 4, 2);
  ASSERT_OK_AND_ASSIGN(m, MeasurePayload(PayloadWithBody(CodecId::kKvtc, 8, kb)));
  EXPECT_EQ(m.raw_positions, 7u);
  EXPECT_EQ(m.raw_position_bytes, 896u);
  // Codecs that code every position: none raw.
  ASSERT_OK_AND_ASSIGN(m, MeasurePayload(PayloadWithBody(CodecId::kSpec, 8, {1, 2, 3})));
  EXPECT_EQ(m.raw_positions, 0u);
  EXPECT_EQ(m.payload_bytes, 139u);
}

TEST(PayloadMemoryTest, BodiesThatLieAreCorruption) {
  // Row counts that do not add up to the header's tokens.
  EXPECT_STATUS(MeasurePayload(PayloadWithBody(CodecId::kDckv, 16, DckvBody(4, 3, 8, false, 128, 50))),
                kCorruption);
  // Raw rows that do not fit in the body (the rows are 128 bytes, 100 sent per row).
  EXPECT_STATUS(MeasurePayload(PayloadWithBody(CodecId::kDckv, 16, DckvBody(4, 3, 9, false, 100, 0))),
                kCorruption);
  // Rows + ids just fitting, then one byte short.
  EXPECT_OK(MeasurePayload(PayloadWithBody(CodecId::kDckv, 16, DckvBody(4, 3, 9, true, 128, 0))));
  std::vector<uint8_t> b = DckvBody(4, 3, 9, true, 128, 0);
  b.pop_back();
  EXPECT_STATUS(MeasurePayload(PayloadWithBody(CodecId::kDckv, 16, b)), kCorruption);
  // No DCKB magic; a body shorter than the row counts.
  b = DckvBody(4, 3, 9, false, 128, 50);
  b[0] ^= 1;
  EXPECT_STATUS(MeasurePayload(PayloadWithBody(CodecId::kDckv, 16, b)), kCorruption);
  EXPECT_STATUS(MeasurePayload(PayloadWithBody(CodecId::kDckv, 16, {1, 2, 3})), kCorruption);
  EXPECT_STATUS(MeasurePayload(PayloadWithBody(CodecId::kKvtc, 16, {1, 2, 3})), kCorruption);
  // A raw payload cut short; row counts that overflow u32 when added.
  std::vector<uint8_t> raw = RawPayload(4, 1);
  raw.pop_back();
  EXPECT_STATUS(MeasurePayload(raw), kCorruption);
  EXPECT_STATUS(MeasurePayload(PayloadWithBody(CodecId::kDckv, 16,
                                               DckvBody(0xFFFFFFFF, 17, 0, false, 0, 0))),
                kCorruption);
  EXPECT_FALSE(MeasurePayload({}).ok());
}

TEST(MetricsTest, RequestMemoryIsCountedPerOpcode) {
  Metrics m;
  m.RecordMemory(Opcode::kPut, RequestMemory{2184, 2048, 130});
  m.RecordMemory(Opcode::kPut, RequestMemory{1120, 896, 0});
  m.RecordMemory(Opcode::kGet, RequestMemory{2184, 2048, 130});
  const std::string text = m.RenderPrometheus(StoreSnapshot{});
  for (const char* line :
       {"kvstash_state_bytes_total{op=\"PUT\"} 130\n", "kvstash_state_records_total{op=\"PUT\"} 1\n",
        "kvstash_state_bytes_total{op=\"GET\"} 130\n",
        "kvstash_request_memory_payload_bytes_total{op=\"PUT\"} 3304\n",
        "kvstash_request_memory_raw_position_bytes_total{op=\"PUT\"} 2944\n",
        // Both PUTs (1120 and 2314 bytes) fall in the bucket (1024, 4096].
        "kvstash_request_memory_bytes_bucket{op=\"PUT\",le=\"1024\"} 0\n",
        "kvstash_request_memory_bytes_bucket{op=\"PUT\",le=\"4096\"} 2\n",
        "kvstash_request_memory_bytes_sum{op=\"PUT\"} 3434\n",
        "kvstash_request_memory_bytes_count{op=\"GET\"} 1\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
  auto j = m.RenderJson(StoreSnapshot{}, "n1");
  EXPECT_EQ(j["memory"]["PUT"]["requests"], 2);
  EXPECT_EQ(j["memory"]["PUT"]["state_bytes"], 130);
  EXPECT_EQ(j["memory"]["PUT"]["raw_position_bytes"], 2944);
  EXPECT_EQ(j["memory"]["PUT"]["request_bytes"], 3434);
  EXPECT_DOUBLE_EQ(j["memory"]["PUT"]["mean_request_bytes"].get<double>(), 1717.0);
  EXPECT_EQ(j["memory"]["GET"]["state_records"], 1);
  EXPECT_EQ(m.RenderTenantJson("a", "n1")["memory"]["GET"]["payload_bytes"], 2184);
}

// Drives a RequestHandler with frames, as a connection would.
class HandlerTest : public ::testing::Test {
 protected:
  HandlerTest()
      : tenants_(TenantTable::Create({{"a", "pa", ""}, {"b", "pb", ""}}).value()),
        handler_(&store_, &tenants_, &metrics_, HandlerLimits{"n1", 1u << 20, 16}) {}

  template <typename Req>
  Frame Request(Opcode op, const Req& req, uint64_t id = 1) {
    Frame f;
    f.header.opcode = static_cast<uint8_t>(op);
    f.header.flags = req.Flags();
    f.header.request_id = id;
    req.Encode(&f.body);
    return f;
  }
  // Sends `req` as `tenant`; returns the reply header status and body.
  template <typename Req>
  std::pair<Status, std::vector<uint8_t>> Call(const std::string& tenant, Opcode op, const Req& req) {
    std::vector<uint8_t> out = handler_.Handle(tenant, Request(op, req, 7)).Flatten();
    auto h = protocol::DecodeFrameHeader(
                 std::span<const uint8_t, protocol::kFrameHeaderBytes>(out.data(), 32)).value();
    EXPECT_EQ(h.request_id, 7u);
    EXPECT_EQ(h.opcode, static_cast<uint8_t>(op) | protocol::kReplyBit);
    std::vector<uint8_t> body(out.begin() + 32, out.end());
    last_reply_flags_ = h.flags;
    EXPECT_EQ(body.size(), h.body_bytes);
    EXPECT_EQ(body.empty() ? 0u : Crc32c(body), h.body_crc32c);
    return {Status::FromCode(h.status, std::string(body.begin(), body.end())), body};
  }
  Status Put(const std::string& tenant, uint32_t key, std::optional<uint32_t> parent,
             uint32_t tokens, bool raw_kv = false) {
    protocol::PutRequest p;
    p.key = Key(key);
    if (parent) p.parent = Key(*parent);
    p.payload = Bound(RawPayload(tokens, key), Key(key));
    p.raw_kv = raw_kv;
    return Call(tenant, Opcode::kPut, p).first;
  }
  protocol::LookupReply Lookup(const std::string& tenant, std::vector<uint32_t> keys) {
    protocol::LookupRequest r;
    for (uint32_t k : keys) r.keys.push_back({Key(k), 16});
    auto [s, body] = Call(tenant, Opcode::kLookup, r);
    EXPECT_OK(s);
    return protocol::LookupReply::Decode(0, body).value();
  }

  uint16_t last_reply_flags_ = 0;
  testing::MemoryChunkStore store_;
  TenantTable tenants_;
  Metrics metrics_;
  RequestHandler handler_;
};

TEST_F(HandlerTest, HelloChecksTheCredential) {
  std::string tenant;
  std::vector<uint8_t> out;
  EXPECT_TRUE(handler_.HandleHello(Request(Opcode::kHello, protocol::HelloRequest{1, "a", "pa", "t"}),
                                   &tenant, &out));
  EXPECT_EQ(tenant, "a");
  auto reply = protocol::HelloReply::Decode(0, std::span<const uint8_t>(out).subspan(32)).value();
  EXPECT_EQ(reply.server_id, "n1");
  EXPECT_EQ(reply.max_in_flight, 16u);
  tenant.clear();
  out.clear();
  EXPECT_FALSE(handler_.HandleHello(Request(Opcode::kHello, protocol::HelloRequest{1, "a", "pb", "t"}),
                                    &tenant, &out));
  EXPECT_TRUE(tenant.empty());
  EXPECT_EQ(out[24], static_cast<uint8_t>(Status::Code::kPermissionDenied));
  // Tenant a's STATS count its successful HELLO only; server-wide both (one error).
  EXPECT_EQ(handler_.TenantStatsJson("a")["requests"]["HELLO"]["count"], 1);
  EXPECT_EQ(handler_.TenantStatsJson("a")["requests"]["HELLO"]["errors"], 0);
  EXPECT_EQ(handler_.TenantStatsJson("b")["requests"]["HELLO"]["count"], 0);
  EXPECT_EQ(handler_.StatsJson()["requests"]["HELLO"]["count"], 2);
  EXPECT_EQ(handler_.StatsJson()["requests"]["HELLO"]["errors"], 1);
}

// A tier whose writes fail (T1 on a full disk) is named on /healthz and in /metrics,
// with the free space it has and needs.
TEST_F(HandlerTest, FailingTierWritesShowOnHealthzAndMetrics) {
  const std::string prom_failing = "kvstash_tier_writes_failing{tier=\"T0\"} ";
  const std::string prom_restart = "kvstash_tier_needs_restart{tier=\"T0\"} ";
  EXPECT_EQ(handler_.HealthDetail(), "");
  EXPECT_NE(handler_.PrometheusText().find(prom_failing + "0\n"), std::string::npos);
  EXPECT_NE(handler_.PrometheusText().find(prom_restart + "0\n"), std::string::npos);
  store_.writes_failing = true;
  store_.disk_free_bytes = (12 << 20) + 1;  // rounded up: 13 MiB
  store_.free_bytes_needed = 64 << 20;
  EXPECT_EQ(handler_.HealthDetail(),
            "T0 writes failing (disk full): PUTs fail, reads are served (degraded); they resume "
            "by themselves once 64 MiB are free (13 MiB free now)\n");
  EXPECT_NE(handler_.PrometheusText().find(prom_failing + "1\n"), std::string::npos);
  EXPECT_NE(handler_.PrometheusText().find(prom_restart + "0\n"), std::string::npos);
  EXPECT_EQ(handler_.StatsJson()["tiers"][0]["writes_failing"], true);
  EXPECT_EQ(handler_.StatsJson()["tiers"][0]["read_only"], false);
  EXPECT_EQ(handler_.StatsJson()["tiers"][0]["disk_free_bytes"], (12 << 20) + 1);
  EXPECT_EQ(handler_.StatsJson()["tiers"][0]["free_bytes_needed"], 64 << 20);
  // Failing with space to spare: not the disk.
  store_.disk_free_bytes = 1ull << 30;
  EXPECT_EQ(handler_.HealthDetail(),
            "T0 writes failing (disk full or I/O error): PUTs fail, reads are served (degraded); "
            "retried at the next PUT, see the server log\n");
  // Opened read-only on a full disk: one line that says a restart is needed, and when.
  store_.read_only = true;
  store_.disk_free_bytes = 3 << 20;
  store_.free_bytes_needed = 100 << 20;
  EXPECT_EQ(handler_.HealthDetail(),
            "T0 read-only (its read-write open at start-up failed for lack of space): PUTs fail, "
            "reads are served (degraded); restart once 100 MiB are free (3 MiB free now)\n");
  EXPECT_EQ(handler_.StatsJson()["tiers"][0]["read_only"], true);
  EXPECT_NE(handler_.PrometheusText().find(prom_restart + "1\n"), std::string::npos);
  // Read-only because its file system is mounted read-only: space is not the fix.
  store_.read_only_filesystem = true;
  EXPECT_EQ(handler_.HealthDetail(),
            "T0 read-only (its file system is mounted read-only): PUTs fail, reads are served "
            "(degraded); check the disk, remount it read-write and restart\n");
  EXPECT_EQ(handler_.StatsJson()["tiers"][0]["read_only_filesystem"], true);
  store_.read_only_filesystem = false;
  // Its WAL failed on a full disk (RocksDB cannot resume it in place): a restart too.
  store_.read_only = false;
  store_.needs_restart = true;
  EXPECT_EQ(handler_.HealthDetail(),
            "T0 needs a restart (its write-ahead log failed while the disk was full): PUTs "
            "fail, reads are served (degraded); restart once 100 MiB are free (3 MiB free now)\n");
  EXPECT_EQ(handler_.StatsJson()["tiers"][0]["needs_restart"], true);
  EXPECT_EQ(handler_.StatsJson()["tiers"][0]["read_only"], false);
  EXPECT_NE(handler_.PrometheusText().find(prom_restart + "1\n"), std::string::npos);
}

TEST_F(HandlerTest, RequestsBeforeHelloArePermissionDeniedExceptPing) {
  EXPECT_STATUS(Call("", Opcode::kLookup, protocol::LookupRequest{}).first, kPermissionDenied);
  auto [s, body] = Call("", Opcode::kPing, protocol::PingMessage{{1, 2, 3}});
  ASSERT_OK(s);
  EXPECT_EQ(body, (std::vector<uint8_t>{1, 2, 3}));
}

TEST_F(HandlerTest, PutLookupGetDeleteChain) {
  ASSERT_OK(Put("a", 1, std::nullopt, 16));
  ASSERT_OK(Put("a", 2, 1, 16));
  ASSERT_OK(Put("a", 3, 2, 16));
  EXPECT_STATUS(Put("a", 5, 4, 16), kNotFound);  // parent missing
  auto l = Lookup("a", {1, 2, 3, 4});
  EXPECT_EQ(l.matched_chunks, 3u);
  EXPECT_EQ(l.matched_tokens, 48u);
  EXPECT_EQ(Lookup("a", {2, 3}).matched_chunks, 2u);
  EXPECT_EQ(Lookup("a", {4, 1}).matched_chunks, 0u);

  auto [gs, gbody] = Call("a", Opcode::kGet, protocol::GetRequest{Key(2)});
  ASSERT_OK(gs);
  auto g = protocol::GetReply::Decode(0, gbody).value();
  EXPECT_EQ(g.payload, Bound(RawPayload(16, 2), Key(2)));
  auto [ds, dbody] = Call("a", Opcode::kDelete, protocol::DeleteRequest{Key(2)});
  ASSERT_OK(ds);
  EXPECT_TRUE(protocol::DeleteReply::Decode(0, dbody).value().existed);
  EXPECT_EQ(Lookup("a", {1, 2, 3}).matched_chunks, 1u);  // 3 went with its parent
  EXPECT_STATUS(Call("a", Opcode::kGet, protocol::GetRequest{Key(3)}).first, kNotFound);
  auto j = handler_.StatsJson();
  EXPECT_EQ(j["lookup"]["lookups"], 4);
  EXPECT_EQ(j["lookup"]["tokens_hit"], 48 + 32 + 16);
  EXPECT_EQ(j["get"]["misses"], 1);
  EXPECT_EQ(j["requests"]["GET"]["errors"], 0);  // a miss is not an error
}

TEST_F(HandlerTest, PutAndGetReportRequestMemory) {
  // Raw chunk (16 positions, 2048 bytes) + hybrid state record (130 bytes).
  protocol::PutRequest p;
  p.key = Key(1);
  p.payload = Bound(RawPayload(16, 1), Key(1));
  p.state_record = SmallStateRecord();
  ASSERT_EQ(p.state_record.size(), 130u);
  p.memory = true;
  auto [s, body] = Call("a", Opcode::kPut, p);
  ASSERT_OK(s);
  EXPECT_EQ(last_reply_flags_, protocol::kReplyFlagMemory);
  auto put = protocol::PutReply::Decode(last_reply_flags_, body).value();
  EXPECT_EQ(put.stored_bytes, 2200u);  // 152-byte header + 16 x 128
  EXPECT_EQ(put.memory, (protocol::ReplyMemory{16, 2048, 130}));
  // Without the flag: the version-1 reply (8 bytes, no flags).
  p.key = Key(2);
  p.parent = Key(1);
  p.payload = Bound(RawPayload(16, 1), Key(2));
  p.memory = false;
  auto [s2, body2] = Call("a", Opcode::kPut, p);
  ASSERT_OK(s2);
  EXPECT_EQ(last_reply_flags_, 0);
  EXPECT_EQ(body2.size(), 8u);

  // GET with state and memory: the same numbers; without state: state 0.
  auto [gs, gbody] = Call("a", Opcode::kGet, protocol::GetRequest{Key(1), false, true, true});
  ASSERT_OK(gs);
  auto g = protocol::GetReply::Decode(last_reply_flags_, gbody).value();
  EXPECT_EQ(g.state_record, p.state_record);
  EXPECT_EQ(g.memory, (protocol::ReplyMemory{16, 2048, 130}));
  auto [gs2, gbody2] = Call("a", Opcode::kGet, protocol::GetRequest{Key(1), false, false, true});
  ASSERT_OK(gs2);
  EXPECT_EQ(protocol::GetReply::Decode(last_reply_flags_, gbody2).value().memory,
            (protocol::ReplyMemory{16, 2048, 0}));

  // A client-encoded dckv payload (7 raw rows of 128 bytes, 1136 bytes) is stored as
  // sent and measured from its body; one whose rows do not fit is refused.
  protocol::PutRequest d;
  d.key = Key(3);
  d.payload = Bound(PayloadWithBody(CodecId::kDckv, 16, DckvBody(4, 3, 9, true, 128, 50)), Key(3));
  d.memory = true;
  auto [ds, dbody] = Call("a", Opcode::kPut, d);
  ASSERT_OK(ds);
  auto dput = protocol::PutReply::Decode(last_reply_flags_, dbody).value();
  EXPECT_EQ(dput.stored_bytes, 1136u);
  EXPECT_EQ(dput.memory, (protocol::ReplyMemory{7, 896, 0}));
  d.key = Key(4);
  d.payload = Bound(PayloadWithBody(CodecId::kDckv, 16, DckvBody(4, 3, 9, true, 100, 0)), Key(4));
  EXPECT_STATUS(Call("a", Opcode::kPut, d).first, kCorruption);

  auto j = handler_.StatsJson();
  EXPECT_EQ(j["memory"]["PUT"]["requests"], 3);
  EXPECT_EQ(j["memory"]["PUT"]["payload_bytes"], 2200 + 2200 + 1136);
  EXPECT_EQ(j["memory"]["PUT"]["raw_position_bytes"], 2048 + 2048 + 896);
  EXPECT_EQ(j["memory"]["PUT"]["state_bytes"], 260);
  EXPECT_EQ(j["memory"]["PUT"]["state_records"], 2);
  EXPECT_EQ(j["memory"]["PUT"]["request_bytes"], 2200 + 2200 + 1136 + 260);
  EXPECT_EQ(j["memory"]["GET"]["requests"], 2);
  EXPECT_EQ(j["memory"]["GET"]["state_bytes"], 130);
  EXPECT_EQ(j["memory"]["GET"]["request_bytes"], 2 * 2200 + 130);
  EXPECT_EQ(j["payload_rejected"], 1);
  EXPECT_EQ(handler_.TenantStatsJson("a")["memory"]["PUT"]["state_bytes"], 260);
  EXPECT_EQ(handler_.TenantStatsJson("b")["memory"]["PUT"]["requests"], 0);
  EXPECT_NE(handler_.PrometheusText().find("kvstash_state_bytes_total{op=\"PUT\"} 260\n"),
            std::string::npos);
}

TEST_F(HandlerTest, TenantsNeverSeeEachOthersEntries) {
  ASSERT_OK(Put("a", 1, std::nullopt, 16));
  EXPECT_EQ(Lookup("a", {1}).matched_chunks, 1u);
  EXPECT_EQ(Lookup("b", {1}).matched_chunks, 0u);
  EXPECT_STATUS(Call("b", Opcode::kGet, protocol::GetRequest{Key(1)}).first, kNotFound);
  auto [ds, dbody] = Call("b", Opcode::kDelete, protocol::DeleteRequest{Key(1)});
  ASSERT_OK(ds);
  EXPECT_FALSE(protocol::DeleteReply::Decode(0, dbody).value().existed);
  EXPECT_EQ(Lookup("a", {1}).matched_chunks, 1u);
}

TEST_F(HandlerTest, PutValidatesPayloads) {
  protocol::PutRequest p;
  p.key = Key(1);
  p.payload = Bound(RawPayload(4, 1), Key(1));
  p.payload[200] ^= 1;  // body byte: body XXH3 mismatch
  EXPECT_STATUS(Call("a", Opcode::kPut, p).first, kCorruption);
  p.payload = Bound(RawPayload(4, 1), Key(1));
  p.payload[10] ^= 1;  // header byte: header CRC mismatch
  EXPECT_STATUS(Call("a", Opcode::kPut, p).first, kCorruption);
  p.payload = {1, 2, 3};
  EXPECT_STATUS(Call("a", Opcode::kPut, p).first, kCorruption);
  // A raw payload whose content checksum lies (body digest recomputed to match).
  KvChunk c = KvChunk::Zeros(testing::SmallLayout(), 4);
  PayloadHeader h{.codec = CodecId::kRaw, .layout = testing::SmallLayout(), .tokens = 4,
                  .content_checksum = 12345, .chunk_key = Key(1)};
  p.payload = BuildPayload(h, c.data).value();
  EXPECT_STATUS(Call("a", Opcode::kPut, p).first, kCorruption);
  // A payload not bound to a key (format version 1), and one bound to another key.
  p.payload = RawPayload(4, 1);
  EXPECT_STATUS(Call("a", Opcode::kPut, p).first, kInvalidArgument);
  p.payload = Bound(RawPayload(4, 1), Key(2));
  EXPECT_STATUS(Call("a", Opcode::kPut, p).first, kInvalidArgument);
  // Raw KV to be encoded with a codec this build lacks.
  p.payload = Bound(RawPayload(4, 1), Key(1));
  p.raw_kv = true;
  p.target_codec = CodecId::kZstd;
  EXPECT_STATUS(Call("a", Opcode::kPut, p).first, kNotSupported);
  p.target_codec = CodecId::kRaw;
  ASSERT_OK(Call("a", Opcode::kPut, p).first);
  // A bad state record.
  p.state_record = {9, 9, 9};
  EXPECT_STATUS(Call("a", Opcode::kPut, p).first, kCorruption);
  // A well-formed payload of a codec id no build knows.
  p.state_record.clear();
  p.raw_kv = false;
  PayloadHeader unknown{.codec = static_cast<CodecId>(77), .layout = testing::SmallLayout(), .tokens = 4,
                        .chunk_key = Key(1)};
  p.payload = BuildPayload(unknown, std::vector<uint8_t>(10, 1)).value();
  EXPECT_STATUS(Call("a", Opcode::kPut, p).first, kInvalidArgument);
  EXPECT_EQ(handler_.StatsJson()["payload_rejected"], 8);
}

TEST_F(HandlerTest, GetDecodedAndStateAndPin) {
  RecurrentState st;
  st.boundary_tokens = 16;
  st.tensors.push_back({"layers.0.state", DType::kF32, {2, 2}, std::vector<uint8_t>(16, 7)});
  protocol::PutRequest p;
  p.key = Key(1);
  p.payload = Bound(RawPayload(16, 1), Key(1));
  p.state_record = EncodeStateRecord(st, Digest256{}).value();
  p.pin = true;
  ASSERT_OK(Call("a", Opcode::kPut, p).first);
  EXPECT_TRUE(store_.IsPinned(ScopeKey("a", Key(1))));
  auto [s, body] = Call("a", Opcode::kGet, protocol::GetRequest{Key(1), true, true});
  ASSERT_OK(s);
  auto g = protocol::GetReply::Decode(0, body).value();
  EXPECT_EQ(g.payload, p.payload);
  EXPECT_EQ(g.state_record, p.state_record);
  ASSERT_OK(Call("a", Opcode::kPin, protocol::PinRequest{Key(1), false}).first);
  EXPECT_FALSE(store_.IsPinned(ScopeKey("a", Key(1))));
  EXPECT_STATUS(Call("a", Opcode::kPin, protocol::PinRequest{Key(9), true}).first, kNotFound);
  protocol::LookupRequest lr;
  lr.keys = {{Key(1), 16}};
  lr.require_state = true;
  auto [ls, lbody] = Call("a", Opcode::kLookup, lr);
  ASSERT_OK(ls);
  EXPECT_EQ(protocol::LookupReply::Decode(0, lbody).value().matched_chunks, 1u);
}

// A storage fault that files key 1's valid payload under key 2 (the class of LMCache
// #4385): the GET of key 2 is Corruption, plain or decoded, never key 1's KV; a stored
// chunk that fails its checksum is Corruption too, not a miss. Both are counted.
TEST_F(HandlerTest, GetRefusesAPayloadOfAnotherKeyAndReportsDamage) {
  ASSERT_OK(Put("a", 1, std::nullopt, 16));
  PutChunk misfiled;
  misfiled.key = ScopeKey("a", Key(2));
  misfiled.tokens = 16;
  const std::vector<uint8_t> other = Bound(RawPayload(16, 1), Key(1));
  misfiled.payload = other;
  ASSERT_OK(store_.Put(misfiled));
  for (bool decoded : {false, true}) {
    const Status s = Call("a", Opcode::kGet, protocol::GetRequest{Key(2), decoded}).first;
    EXPECT_STATUS(s, kCorruption);
    EXPECT_NE(s.message().find("bound to key " + ToHex(Key(1))), std::string::npos) << s.ToString();
  }
  // An unbound (format version 1) payload in the store: Mismatch, not served.
  misfiled.key = ScopeKey("a", Key(3));
  const std::vector<uint8_t> unbound = RawPayload(16, 3);
  misfiled.payload = unbound;
  ASSERT_OK(store_.Put(misfiled));
  EXPECT_STATUS(Call("a", Opcode::kGet, protocol::GetRequest{Key(3)}).first, kMismatch);
  // Damage on disk: Corruption, counted apart from misses.
  store_.MarkCorrupt(ScopeKey("a", Key(1)));
  EXPECT_STATUS(Call("a", Opcode::kGet, protocol::GetRequest{Key(1)}).first, kCorruption);
  auto j = handler_.StatsJson();
  EXPECT_EQ(j["get"]["corrupt"], 3);
  EXPECT_EQ(j["get"]["misses"], 0);
  EXPECT_NE(handler_.PrometheusText().find("kvstash_get_corrupt_total 3\n"), std::string::npos);
}

// A server_id that is not UTF-8 (Validate refuses one since; a handler built without
// it) made STATS throw nlohmann's type_error 316 on a worker thread: the server aborted.
TEST_F(HandlerTest, StatsReplyNeverThrowsOnBytesThatAreNotUtf8) {
  RequestHandler odd(&store_, &tenants_, &metrics_, HandlerLimits{"bad\xff\xfeid", 1u << 20, 16});
  std::vector<uint8_t> out = odd.Handle("a", Request(Opcode::kStats, protocol::StatsRequest{})).Flatten();
  ASSERT_GT(out.size(), 32u);
  auto j = nlohmann::json::parse(std::string(out.begin() + 32, out.end()));
  EXPECT_EQ(j["server_id"], "bad\xef\xbf\xbd\xef\xbf\xbdid");  // each bad byte as U+FFFD
}

TEST_F(HandlerTest, StatsReplyShowsTheTenantsOwnTrafficOnly) {
  // Tenant b: 2 PUTs and one LOOKUP; tenant a: one PUT and a GET miss.
  ASSERT_OK(Put("b", 1, std::nullopt, 16));
  ASSERT_OK(Put("b", 2, 1, 16));
  protocol::LookupRequest l;
  l.keys = {{Key(1), 16}, {Key(2), 16}, {Key(3), 16}};
  ASSERT_OK(Call("b", Opcode::kLookup, l).first);
  ASSERT_OK(Put("a", 1, std::nullopt, 8));
  EXPECT_STATUS(Call("a", Opcode::kGet, protocol::GetRequest{Key(9)}).first, kNotFound);

  auto [s, body] = Call("a", Opcode::kStats, protocol::StatsRequest{});
  ASSERT_OK(s);
  auto j = nlohmann::json::parse(std::string(body.begin(), body.end()));
  EXPECT_EQ(j["server_id"], "n1");
  EXPECT_EQ(j["tenant"], "a");
  EXPECT_EQ(j["scope"], "tenant");
  EXPECT_EQ(j["requests"]["PUT"]["count"], 1);
  EXPECT_EQ(j["requests"]["LOOKUP"]["count"], 0);
  EXPECT_EQ(j["lookup"]["tokens_requested"], 0);
  EXPECT_EQ(j["get"]["misses"], 1);
  EXPECT_EQ(j["codecs"]["raw"]["chunks"], 1);
  // Nothing server-wide: no tiers, connections, other tenants or store totals.
  for (const char* key : {"tiers", "connections", "pinned_entries", "index_entries",
                          "checksum_failures", "bad_frames", "auth_failures"}) {
    EXPECT_FALSE(j.contains(key)) << key;
  }
  EXPECT_EQ(j.dump().find("\"b\""), std::string::npos);

  auto [sb, body_b] = Call("b", Opcode::kStats, protocol::StatsRequest{});
  ASSERT_OK(sb);
  auto jb = nlohmann::json::parse(std::string(body_b.begin(), body_b.end()));
  EXPECT_EQ(jb["requests"]["PUT"]["count"], 2);
  EXPECT_EQ(jb["lookup"]["tokens_requested"], 48);
  EXPECT_EQ(jb["lookup"]["tokens_hit"], 32);
  EXPECT_EQ(jb["requests"]["STATS"]["count"], 0);  // recorded after the reply is built

  // Operators still see everything (the /v1/stats document).
  auto all = handler_.StatsJson();
  EXPECT_EQ(all["scope"], "server");
  EXPECT_EQ(all["requests"]["PUT"]["count"], 3);
  EXPECT_EQ(all["tiers"][0]["name"], "T0");
  // ... with each tenant's headline numbers, in the document and in /metrics.
  EXPECT_EQ(all["tenants"]["b"]["tokens_requested"], 48);
  EXPECT_EQ(all["tenants"]["b"]["tokens_hit"], 32);
  EXPECT_DOUBLE_EQ(all["tenants"]["b"]["hit_rate"].get<double>(), 32.0 / 48.0);
  EXPECT_EQ(all["tenants"]["a"]["tokens_requested"], 0);
  EXPECT_DOUBLE_EQ(all["tenants"]["a"]["hit_rate"].get<double>(), 0.0);
  EXPECT_EQ(all["tenants"]["a"]["put_raw_bytes"], all["codecs"]["raw"]["raw_bytes"].get<uint64_t>() / 5);
  const std::string text = handler_.PrometheusText();
  EXPECT_NE(text.find("kvstash_tenant_lookup_tokens_hit_total{tenant=\"b\"} 32\n"), std::string::npos);
  EXPECT_NE(text.find("kvstash_tenant_lookup_tokens_requested_total{tenant=\"b\"} 48\n"), std::string::npos);
  EXPECT_NE(text.find("kvstash_tenant_lookup_tokens_hit_total{tenant=\"a\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE kvstash_tenant_requests_total counter\n"), std::string::npos);
}

TEST_F(HandlerTest, ParentNotFoundNamesTheClientsKeyNeverTheScopedOne) {
  const Status s = Put("a", 5, 4, 16);
  EXPECT_STATUS(s, kNotFound);
  EXPECT_NE(s.message().find(ToHex(Key(4))), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(ToHex(Key(5))), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find(ToHex(ScopeKey("a", Key(4)))), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find(ToHex(ScopeKey("a", Key(5)))), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kvstash::server
