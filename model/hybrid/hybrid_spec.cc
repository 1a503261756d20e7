#include "model/hybrid/hybrid_spec.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <string>

#include "kvstash/payload_format.h"

namespace kvstash::hybrid {
namespace {

StateTensor F32Tensor(std::string name, std::vector<uint64_t> shape, std::span<const uint8_t> bytes) {
  StateTensor t;
  t.name = std::move(name);
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data.assign(bytes.begin(), bytes.end());
  return t;
}

// The inverse of KvTensors for a decoded state: the canonical chunk.
Result<KvChunk> ChunkFromTensors(const HybridConfig& c, const RecurrentState& r, uint32_t tokens) {
  const KvLayout layout = HybridKvLayout(c);
  if (r.tensors.size() != 2ull * layout.n_layers) return Status::Corruption("hybrid spec: KV tensor count");
  KvChunk chunk = KvChunk::Zeros(layout, tokens);
  for (uint32_t a = 0; a < layout.n_layers; ++a) {
    const auto& k = r.tensors[2 * a].data;
    const auto& v = r.tensors[2 * a + 1].data;
    auto dk = chunk.MutableK(a), dv = chunk.MutableV(a);
    if (k.size() != dk.size() || v.size() != dv.size()) return Status::Corruption("hybrid spec: KV tensor size");
    std::memcpy(dk.data(), k.data(), k.size());
    std::memcpy(dv.data(), v.data(), v.size());
  }
  return chunk;
}

}  // namespace

Result<RecurrentState> KvTensors(const HybridConfig& c, const HybridState& state, uint32_t begin, uint32_t end) {
  KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk, ExportKvChunk(c, state, begin, end));
  return KvTensors(c, chunk, begin);
}

Result<RecurrentState> KvTensors(const HybridConfig& c, const KvChunk& chunk, uint32_t begin) {
  if (!(chunk.layout == HybridKvLayout(c)))
    return Status::InvalidArgument("hybrid spec: a chunk of another layout");
  RecurrentState r;
  r.boundary_tokens = begin + chunk.tokens;
  const std::vector<uint64_t> shape = {chunk.tokens, c.num_key_value_heads, c.head_dim};
  for (uint32_t a = 0; a < chunk.layout.n_layers; ++a) {
    r.tensors.push_back(F32Tensor("kv." + std::to_string(a) + ".k", shape, chunk.view().K(a)));
    r.tensors.push_back(F32Tensor("kv." + std::to_string(a) + ".v", shape, chunk.view().V(a)));
  }
  return r;
}

Result<std::vector<uint8_t>> EncodeHybridSpecChunk(const HybridModel& model, const spec::SpecStateArtifact& artifact,
                                                   const HybridState& exact, const HybridState& predicted,
                                                   uint32_t begin, uint32_t end, bool partial,
                                                   spec::StateCodingStats* stats) {
  KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk, ExportKvChunk(model.config(), exact, begin, end));
  return EncodeHybridSpecChunk(model, artifact, chunk, predicted, begin, partial, stats);
}

Result<std::vector<uint8_t>> EncodeHybridSpecChunk(const HybridModel& model,
                                                   const spec::SpecStateArtifact& artifact,
                                                   const KvChunk& exact, const HybridState& predicted,
                                                   uint32_t begin, bool partial,
                                                   spec::StateCodingStats* stats) {
  const HybridConfig& c = model.config();
  KVSTASH_ASSIGN_OR_RETURN(RecurrentState want, KvTensors(c, exact, begin));
  KVSTASH_ASSIGN_OR_RETURN(RecurrentState pred, KvTensors(c, predicted, begin, begin + exact.tokens));
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> body, spec::EncodeSpecState(artifact, want, pred, stats));
  return BuildPayload(ChunkPayloadHeader(CodecId::kSpec, exact.view(), begin, partial, model.fingerprint()),
                      body);
}

Result<std::vector<uint8_t>> EncodeHybridSpecState(const HybridModel& model, const spec::SpecStateArtifact& artifact,
                                                   const RecurrentState& exact, const RecurrentState& predicted,
                                                   spec::StateCodingStats* stats) {
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> body, spec::EncodeSpecState(artifact, exact, predicted, stats));
  RecurrentState wrapped;
  wrapped.boundary_tokens = exact.boundary_tokens;
  StateTensor t;
  t.name = kSpecStateBodyTensor;
  t.dtype = DType::kU8;
  t.shape = {body.size()};
  t.data = std::move(body);
  wrapped.tensors.push_back(std::move(t));
  return EncodeStateRecord(wrapped, model.fingerprint());
}

Result<HybridState> RestoreHybridSpecBoundary(const HybridModel& model, const HybridPredictor& predictor,
                                              const spec::SpecStateArtifact& artifact,
                                              std::span<const uint32_t> prefix,
                                              std::span<const std::vector<uint8_t>> kv_payloads,
                                              std::span<const uint8_t> state_record, double* predictor_ms) {
  const HybridConfig& c = model.config();
  const KvLayout layout = HybridKvLayout(c);
  std::vector<PayloadView> parsed;
  uint64_t at = 0;
  for (size_t i = 0; i < kv_payloads.size(); ++i) {
    const std::string where = "hybrid spec restore: KV payload " + std::to_string(i);
    auto p = ParsePayload(kv_payloads[i]);
    if (!p.ok()) return p.status().WithContext(where);
    const PayloadHeader& h = p->header;
    if (h.codec != CodecId::kSpec) return Status::Mismatch(where + " is not codec spec");
    if (h.layout != layout) return Status::Mismatch(where + " has another KV layout");
    if (h.model_fingerprint != model.fingerprint()) return Status::Mismatch(where + " is of another model");
    if (h.token_offset != at) {
      return Status::Corruption(where + " starts at token " + std::to_string(h.token_offset) + ", expected " +
                                std::to_string(at));
    }
    at += h.tokens;
    parsed.push_back(std::move(*p));
  }
  if (at > prefix.size()) {
    return Status::InvalidArgument("hybrid spec restore: the payloads reach token " + std::to_string(at) +
                                   ", the prefix has " + std::to_string(prefix.size()));
  }
  auto record = DecodeStateRecord(state_record);
  if (!record.ok()) return record.status().WithContext("hybrid spec restore: state record");
  if (record->model_fingerprint != model.fingerprint()) {
    return Status::Mismatch("hybrid spec restore: the state record is of another model");
  }
  if (record->state.boundary_tokens != at) {
    return Status::Corruption("hybrid spec restore: the state record is at token " +
                              std::to_string(record->state.boundary_tokens) + ", the KV payloads end at " +
                              std::to_string(at));
  }
  const auto t0 = std::chrono::steady_clock::now();
  HybridState pred = HybridState::Empty(c);
  KVSTASH_RETURN_IF_ERROR(predictor.Eval(prefix.first(at), &pred));
  if (predictor_ms) {
    *predictor_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::vector<KvChunk> chunks;
  uint32_t begin = 0;
  for (size_t i = 0; i < parsed.size(); ++i) {
    const PayloadHeader& h = parsed[i].header;
    const uint32_t end = begin + h.tokens;
    KVSTASH_ASSIGN_OR_RETURN(RecurrentState pk, KvTensors(c, pred, begin, end));
    auto kv = spec::DecodeSpecState(artifact, parsed[i].body, pk);
    if (!kv.ok()) return kv.status().WithContext("hybrid spec restore: KV payload " + std::to_string(i));
    KVSTASH_ASSIGN_OR_RETURN(KvChunk chunk, ChunkFromTensors(c, *kv, h.tokens));
    if (chunk.ContentChecksum() != h.content_checksum) {
      return Status::Corruption("hybrid spec restore: KV payload " + std::to_string(i) +
                                " decodes to content that disagrees with its header checksum");
    }
    chunks.push_back(std::move(chunk));
    begin = end;
  }
  RecurrentState recurrent;
  const auto& ts = record->state.tensors;
  if (ts.size() == 1 && ts[0].name == kSpecStateBodyTensor && ts[0].dtype == DType::kU8) {
    KVSTASH_ASSIGN_OR_RETURN(RecurrentState pr, ExportRecurrentState(c, pred));
    auto st = spec::DecodeSpecState(artifact, ts[0].data, pr);
    if (!st.ok()) return st.status().WithContext("hybrid spec restore: state record");
    recurrent = std::move(*st);
  } else {
    recurrent = std::move(record->state);
  }
  return ImportState(c, chunks, recurrent);
}

Result<spec::SpecStateArtifact> CalibrateHybridSpec(const HybridModel& model, const HybridPredictor& predictor,
                                                    std::span<const std::vector<uint32_t>> sequences,
                                                    uint32_t every) {
  if (sequences.empty() || every == 0) {
    return Status::InvalidArgument("hybrid spec calibration: no sequences or a step of 0");
  }
  const HybridConfig& c = model.config();
  std::deque<RecurrentState> keep;  // stable addresses for the pairs
  std::vector<spec::StateCalibrationPair> pairs;
  for (const auto& seq : sequences) {
    HybridState exact = HybridState::Empty(c), pred = HybridState::Empty(c);
    for (uint32_t b = 0; b < seq.size(); b += every) {
      const uint32_t e = static_cast<uint32_t>(std::min<size_t>(seq.size(), b + every));
      const auto part = std::span(seq).subspan(b, e - b);
      KVSTASH_RETURN_IF_ERROR(model.EvalSequence(part, &exact, {}));
      KVSTASH_RETURN_IF_ERROR(predictor.Eval(part, &pred));
      KVSTASH_ASSIGN_OR_RETURN(keep.emplace_back(), ExportRecurrentState(c, exact));
      KVSTASH_ASSIGN_OR_RETURN(keep.emplace_back(), ExportRecurrentState(c, pred));
      pairs.push_back({&keep[keep.size() - 2], &keep[keep.size() - 1]});
      KVSTASH_ASSIGN_OR_RETURN(keep.emplace_back(), KvTensors(c, exact, b, e));
      KVSTASH_ASSIGN_OR_RETURN(keep.emplace_back(), KvTensors(c, pred, b, e));
      pairs.push_back({&keep[keep.size() - 2], &keep[keep.size() - 1]});
    }
  }
  return spec::CalibrateSpecState(pairs);
}

}  // namespace kvstash::hybrid
