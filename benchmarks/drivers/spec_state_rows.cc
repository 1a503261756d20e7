#include "benchmarks/drivers/spec_state_rows.h"

#include <ctime>

#include "codec/spec/spec_state_codec.h"

namespace kvstash::bench {

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

Result<SpecStateTotals> CodeSpecStates(const spec::SpecStateArtifact& artifact,
                                       const std::vector<RecurrentState>& exact,
                                       const std::vector<RecurrentState>& predicted,
                                       const std::string& what) {
  SpecStateTotals t;
  for (size_t i = 0; i < exact.size(); ++i) {
    spec::StateCodingStats st;
    const double t0 = ThreadCpuSeconds();
    KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> body, spec::EncodeSpecState(artifact, exact[i], predicted[i], &st));
    const double t1 = ThreadCpuSeconds();
    auto back = spec::DecodeSpecState(artifact, body, predicted[i]);
    t.decode_s += ThreadCpuSeconds() - t1;
    t.encode_s += t1 - t0;
    if (!back.ok() || !(*back == exact[i])) {
      return Status::Internal(what + ": boundary " + std::to_string(i) + " failed to round-trip");
    }
    t.stored_bytes += body.size();
    t.scalars += st.scalars;
    for (const auto& [k, v] : st.ideal_bits_by_kind) {
      t.kinds[k].first += v.first;
      t.kinds[k].second += v.second;
      t.ideal_bits += v.first;
    }
  }
  return t;
}

nlohmann::json StateRow(const std::string& model, const std::string& part, const std::string& codec,
                        uint64_t tokens, uint64_t boundaries, uint64_t scalars, uint64_t stored) {
  const double raw = 4.0 * static_cast<double>(scalars);
  return {{"model", model},
          {"part", part},
          {"codec", codec},
          {"dtype", "f32"},
          {"tokens", tokens},
          {"boundaries", boundaries},
          {"scalars", scalars},
          {"raw_bytes", static_cast<uint64_t>(raw)},
          {"stored_bytes", stored},
          {"ratio", raw / static_cast<double>(stored)},
          {"ratio_vs_raw", static_cast<double>(stored) / raw},
          {"bits_per_scalar", 8.0 * static_cast<double>(stored) / static_cast<double>(scalars)},
          {"lossless", true}};
}

void AddSpecStateFields(const SpecStateTotals& t, uint64_t scalars, uint64_t baseline_bytes,
                        const std::string& predictor, double predictor_cost, uint64_t artifact_bytes,
                        nlohmann::json* row) {
  nlohmann::json& r = *row;
  const double raw_mb = 4.0 * static_cast<double>(scalars) / 1e6;
  r["ratio_vs_baseline"] = static_cast<double>(t.stored_bytes) / static_cast<double>(baseline_bytes);
  r["ideal_bits_per_scalar"] = t.ideal_bits / static_cast<double>(scalars);
  r["encode_mb_s"] = raw_mb / t.encode_s;
  r["decode_mb_s"] = raw_mb / t.decode_s;
  r["predictor"] = predictor;
  r["predictor_cost_vs_forward"] = predictor_cost;
  r["artifact_bytes"] = artifact_bytes;
  nlohmann::json by_kind = nlohmann::json::object();
  for (const auto& [k, v] : t.kinds) by_kind[k] = v.first / static_cast<double>(v.second);
  r["ideal_bits_per_scalar_by_kind"] = by_kind;
}

}  // namespace kvstash::bench
