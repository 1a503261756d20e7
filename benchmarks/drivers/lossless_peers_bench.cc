#include "benchmarks/drivers/lossless_peers_bench.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "benchmarks/drivers/peer_coders.h"
#include "benchmarks/drivers/spec_bench_kv.h"
#include "benchmarks/drivers/spec_state_rows.h"
#include "codec/baselines/byte_plane.h"
#include "codec/spec/spec_codec.h"
#include "model/forward/kv_export.h"

namespace kvstash::bench {
namespace {

// One coder's sums over the evaluation chunks.
struct Totals {
  std::string codec;
  uint64_t stored = 0;
  double encode_s = 0, decode_s = 0;  // thread CPU seconds
};

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

nlohmann::json LoadAverage() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return nlohmann::json();
  return {load[0], load[1], load[2]};
}

nlohmann::json Row(const Totals& t, DType dt, uint64_t tokens, size_t chunks, uint64_t raw, double scalars) {
  return {{"codec", t.codec},
          {"dtype", DTypeName(dt)},
          {"tokens", tokens},
          {"chunks", chunks},
          {"raw_bytes", raw},
          {"stored_bytes", t.stored},
          {"ratio", static_cast<double>(raw) / static_cast<double>(t.stored)},
          {"bits_per_scalar", 8.0 * static_cast<double>(t.stored) / scalars},
          {"encode_mb_s", static_cast<double>(raw) / t.encode_s / 1e6},
          {"decode_mb_s", static_cast<double>(raw) / t.decode_s / 1e6},
          {"lossless", true}};
}

// Times one call in thread CPU seconds, adding them to *seconds.
template <typename F>
auto Timed(double* seconds, F&& fn) {
  const double t0 = ThreadCpuSeconds();
  auto result = fn();
  *seconds += ThreadCpuSeconds() - t0;
  return result;
}

}  // namespace

Result<nlohmann::json> RunLosslessPeersBench(const LosslessPeersBenchOptions& options) {
  const SpecBenchOptions& o = options.spec;
  nlohmann::json out;
  out["setup"] = {{"cpu_model", CpuModel()}, {"load_average_start", LoadAverage()}};
  KVSTASH_ASSIGN_OR_RETURN(auto kv, LoadSpecBenchKv(o, /*with_published=*/false, "lossless-peers"));
  const model::SpecPredictorOptions& po = kv->predictor_options;
  const DocRunTimes& eval_times = kv->eval_times;
  const auto& cal_chunks = kv->cal_chunks;
  const auto& eval_chunks = kv->eval_chunks;
  const auto& eval_docs = kv->eval_docs;
  uint64_t eval_doc_tokens = 0;
  for (const DocRun& d : eval_docs) eval_doc_tokens += d.tokens.size();
  const double pred_ms_per_token = 1e3 * eval_times.predictor_s / static_cast<double>(eval_doc_tokens);
  const double pred_cpu_ms_per_token = 1e3 * eval_times.predictor_cpu_s / static_cast<double>(eval_doc_tokens);
  const model::ModelConfig& mc = kv->target->config;
  const Digest256 fingerprint{};  // the benchmark never mixes models
  const std::vector<PeerCoder> peers = PeerCoders();

  out["setup"].update({{"model", o.model_path},
                       {"predictor", po.VariantName()},
                       {"threads", o.threads},
                       {"calibration_tokens", cal_chunks.size() * o.chunk_tokens},
                       {"evaluation_tokens", eval_chunks.size() * o.chunk_tokens},
                       {"chunk_tokens", o.chunk_tokens},
                       {"evaluation_document_tokens", eval_doc_tokens},
                       {"predictor_s", eval_times.predictor_s},
                       {"predictor_cpu_s", eval_times.predictor_cpu_s},
                       {"prefill_s", eval_times.prefill_s},
                       {"calibration_files", model::CorpusFiles(model::CorpusSplit::kCalibration)},
                       {"evaluation_files", model::CorpusFiles(model::CorpusSplit::kEvaluation)}});
  out["rows"] = nlohmann::json::array();
  out["dumps"] = nlohmann::json::array();

  for (DType dt : o.dtypes) {
    const KvLayout L{mc.n_layers, mc.n_kv_heads, mc.head_dim, dt};
    const size_t width = DTypeSize(dt);
    const std::vector<float> scales = dt == DType::kFP8E4M3 ? Fp8Scales(cal_chunks, L) : std::vector<float>();
    auto chunk_of = [&](const ChunkRef& c) { return model::ToKvChunk(c.doc->target, c.begin, c.end, dt, scales); };
    std::vector<KvChunk> cal;
    for (const ChunkRef& c : cal_chunks) {
      KVSTASH_ASSIGN_OR_RETURN(KvChunk k, chunk_of(c));
      cal.push_back(std::move(k));
    }
    KVSTASH_ASSIGN_OR_RETURN(spec::SpecArtifact art,
                             Calibrate(L, cal, cal_chunks, *kv->predictor, po.VariantName(), nullptr));
    const Digest256 art_digest = art.Digest();

    std::ofstream dump;
    const std::string dump_path = options.dump_dir + "/kv-" + std::string(DTypeName(dt)) + ".bin";
    if (!options.dump_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(options.dump_dir, ec);
      dump.open(dump_path, std::ios::binary | std::ios::trunc);
      if (!dump) return Status::IOError("cannot write " + dump_path);
    }

    Totals spec_t{"spec"}, bp_t{"byte-plane-rans"};
    std::vector<Totals> peer_t;
    for (const PeerCoder& p : peers) peer_t.push_back({p.name});
    uint64_t raw = 0;
    const uint64_t scale_bytes = 4 * scales.size();
    for (const ChunkRef& c : eval_chunks) {
      KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk, chunk_of(c));
      raw += chunk.data.size();
      if (dump.is_open()) {
        dump.write(reinterpret_cast<const char*>(chunk.data.data()), static_cast<std::streamsize>(chunk.data.size()));
        if (!dump) return Status::IOError("cannot write " + dump_path);
      }
      const std::string where = " on a " + std::string(DTypeName(dt)) + " chunk at token " + std::to_string(c.begin);

      const auto pred = spec::PredictedSlice(c.doc->pred, L, c.begin, c.end);
      KVSTASH_ASSIGN_OR_RETURN(auto payload, Timed(&spec_t.encode_s, [&] {
                                 return spec::EncodeSpecPayload(art, art_digest, chunk.view(), pred, fingerprint,
                                                                c.begin);
                               }));
      auto back = Timed(&spec_t.decode_s,
                        [&] { return spec::DecodeSpecPayload(art, art_digest, payload, pred, fingerprint); });
      if (!back.ok() || back->data != chunk.data || back->scales != chunk.scales) {
        return Status::Internal("spec did not round-trip" + where);
      }
      spec_t.stored += payload.size();

      KVSTASH_ASSIGN_OR_RETURN(auto bp, Timed(&bp_t.encode_s, [&] {
                                 return baselines::EncodeBytePlanePayload(chunk.view(), fingerprint, c.begin);
                               }));
      auto bpb = Timed(&bp_t.decode_s, [&] { return baselines::DecodeBytePlanePayload(bp); });
      if (!bpb.ok() || bpb->data != chunk.data || bpb->scales != chunk.scales) {
        return Status::Internal("byte-plane rANS did not round-trip" + where);
      }
      bp_t.stored += bp.size();

      std::vector<uint8_t> decoded(chunk.data.size());
      for (size_t i = 0; i < peers.size(); ++i) {
        KVSTASH_ASSIGN_OR_RETURN(auto packed, Timed(&peer_t[i].encode_s, [&] {
                                   return peers[i].encode(chunk.data, width);
                                 }));
        std::fill(decoded.begin(), decoded.end(), 0);
        const Status st = Timed(&peer_t[i].decode_s, [&] { return peers[i].decode(packed, width, decoded); });
        if (!st.ok() || decoded != chunk.data) {
          return Status::Internal(peers[i].name + " did not round-trip" + where + ": " + st.ToString());
        }
        peer_t[i].stored += packed.size() + scale_bytes;
      }
    }
    const uint64_t tokens = eval_chunks.size() * o.chunk_tokens;
    const double scalars = static_cast<double>(tokens) * L.ScalarsPerToken();
    nlohmann::json spec_row = Row(spec_t, dt, tokens, eval_chunks.size(), raw, scalars);
    spec_row["predictor_ms_per_token"] = pred_ms_per_token;
    spec_row["predictor_cpu_ms_per_token"] = pred_cpu_ms_per_token;
    spec_row["decode_with_predictor_mb_s"] =
        static_cast<double>(raw) / (spec_t.decode_s + 1e-3 * pred_cpu_ms_per_token * static_cast<double>(tokens)) / 1e6;
    out["rows"].push_back(spec_row);
    out["rows"].push_back(Row(bp_t, dt, tokens, eval_chunks.size(), raw, scalars));
    for (const Totals& t : peer_t) out["rows"].push_back(Row(t, dt, tokens, eval_chunks.size(), raw, scalars));
    if (dump.is_open()) {
      out["dumps"].push_back({{"path", dump_path},
                              {"dtype", DTypeName(dt)},
                              {"element_bytes", width},
                              {"chunk_bytes", raw / eval_chunks.size()},
                              {"chunks", eval_chunks.size()},
                              {"fp8_scale_bytes_per_chunk", scale_bytes}});
    }
  }
  out["setup"]["load_average_end"] = LoadAverage();
  return out;
}

}  // namespace kvstash::bench
