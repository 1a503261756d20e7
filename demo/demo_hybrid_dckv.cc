// The dckv coder of the hybrid demo (demo/demo_hybrid_codec.h): the attention
// layers' KV lossy-coded with dckv (codec/dckv/dckv_codec.h, decoded to bf16 and
// widened to fp32 on restore), the recurrent state stored exact (raw state records).
// Its artifact is calibrated on the hybrid's own attention K/V (CalibrateHybridDckv).
#include <cstring>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "codec/dckv/dckv_rope.h"
#include "demo/demo_hybrid_codec.h"
#include "kvstash/dtype_bits.h"
#include "kvstash/payload_format.h"

namespace kvstash::demo {
namespace {

class DckvHybridCoder : public HybridKvCoder {
 public:
  DckvHybridCoder(const hybrid::HybridModel& model, std::shared_ptr<const dckv::DckvCodec> codec)
      : model_(model), codec_(std::move(codec)) {}
  std::string name() const override { return "dckv"; }
  std::string codec_id() const override { return "dckv"; }
  std::string artifact_digest() const override { return ToHex(codec_->digest()); }
  bool lossy() const override { return true; }

  Result<std::vector<uint8_t>> EncodeChunk(std::span<const uint32_t> prefix, const KvChunk& chunk,
                                           uint32_t begin, bool) const override {
    return codec_->Encode(chunk.view(), begin, static_cast<uint32_t>(prefix.size()), model_.fingerprint());
  }

  Result<std::vector<uint8_t>> EncodeState(std::span<const uint32_t>, const RecurrentState& r) const override {
    return EncodeStateRecord(r, model_.fingerprint());
  }

  Result<hybrid::HybridState> Restore(std::span<const uint32_t>, std::span<const std::vector<uint8_t>> payloads,
                                      std::span<const uint8_t> record, double* predictor_ms) const override {
    if (predictor_ms) *predictor_ms = 0;
    const KvLayout f32 = hybrid::HybridKvLayout(model_.config());
    std::vector<KvChunk> chunks;
    uint64_t at = 0;
    for (size_t i = 0; i < payloads.size(); ++i) {
      const std::string where = "hybrid dckv restore: KV payload " + std::to_string(i);
      auto h = ParsePayloadHeader(payloads[i]);
      if (!h.ok()) return h.status().WithContext(where);
      if (h->token_offset != at) return Status::Corruption(where + " is not at token " + std::to_string(at));
      auto bf16 = codec_->Decode(payloads[i], model_.fingerprint());
      if (!bf16.ok()) return bf16.status().WithContext(where);
      KvChunk c = KvChunk::Zeros(f32, bf16->tokens);
      const auto* src = reinterpret_cast<const uint16_t*>(bf16->data.data());
      auto* dst = reinterpret_cast<float*>(c.data.data());
      for (size_t j = 0; j < bf16->data.size() / 2; ++j) dst[j] = Bf16ToF32(src[j]);
      at += bf16->tokens;
      chunks.push_back(std::move(c));
    }
    auto r = DecodeStateRecord(record);
    if (!r.ok()) return r.status().WithContext("hybrid dckv restore: state record");
    if (r->model_fingerprint != model_.fingerprint()) {
      return Status::Mismatch("hybrid dckv restore: the state record is of another model");
    }
    if (r->state.boundary_tokens != at) return Status::Corruption("hybrid dckv restore: state record boundary");
    return hybrid::ImportState(model_.config(), chunks, r->state);
  }

 private:
  const hybrid::HybridModel& model_;
  std::shared_ptr<const dckv::DckvCodec> codec_;
};

}  // namespace

std::unique_ptr<HybridKvCoder> MakeDckvHybridCoder(const hybrid::HybridModel& model,
                                                   std::shared_ptr<const dckv::DckvCodec> codec) {
  return std::make_unique<DckvHybridCoder>(model, std::move(codec));
}

Result<dckv::DckvArtifact> CalibrateHybridDckv(const hybrid::HybridModel& model,
                                               std::span<const std::vector<uint32_t>> sequences,
                                               double target_ratio) {
  const hybrid::HybridConfig& c = model.config();
  const KvLayout L = hybrid::HybridKvLayout(c);
  constexpr uint32_t kRawHead = 4;
  auto rows = dckv::DckvRows::ForShape(L.n_layers, L.n_kv_heads, L.head_dim);
  const uint64_t hr = uint64_t{L.n_kv_heads} * L.head_dim;
  for (const auto& seq : sequences) {
    if (seq.size() <= kRawHead) continue;
    hybrid::HybridState s = hybrid::HybridState::Empty(c);
    KVSTASH_RETURN_IF_ERROR(model.EvalSequence(seq, &s, {}));
    uint32_t a = 0;
    for (uint32_t l = 0; l < c.num_layers(); ++l) {
      if (c.layer_types[l] != hybrid::LayerKind::kFullAttention) continue;
      std::vector<float> k(s.layers[l].keys.begin() + kRawHead * hr, s.layers[l].keys.end());
      // The codec un-rotates K with its own (full head_dim) RoPE: calibrate on exactly that.
      for (uint64_t p = kRawHead; p < seq.size(); ++p) {
        for (uint32_t h = 0; h < L.n_kv_heads; ++h) {
          dckv::RotateHead(k.data() + (p - kRawHead) * hr + uint64_t{h} * L.head_dim, L.head_dim,
                           static_cast<uint32_t>(p), c.rope_theta, /*inverse=*/true);
        }
      }
      rows.k[a].insert(rows.k[a].end(), k.begin(), k.end());
      rows.v[a].insert(rows.v[a].end(), s.layers[l].values.begin() + kRawHead * hr, s.layers[l].values.end());
      ++a;
    }
    rows.rows += seq.size() - kRawHead;
  }
  KVSTASH_ASSIGN_OR_RETURN(auto basis, dckv::FitDckvBasis(rows, 1));
  dckv::DckvRateOptions ro;
  ro.target_ratio = target_ratio;
  ro.rope_theta = c.rope_theta;
  ro.raw_head = kRawHead;
  ro.raw_tail = 128;
  ro.checkerboard = false;  // no token conditioning: the tiny model's ids are not a tokenizer's
  return dckv::MakeDckvArtifact(basis, ro);
}

}  // namespace kvstash::demo
