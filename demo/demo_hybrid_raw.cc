// The raw coder of the hybrid demo (demo/demo_hybrid_codec.h): codec-raw f32 KV
// payloads and raw state records, restored through hybrid::RestoreStoredBoundary.
#include "demo/demo_hybrid_codec.h"
#include "kvstash/payload_format.h"
#include "model/hybrid/hybrid_stored.h"

namespace kvstash::demo {
namespace {

class RawHybridCoder : public HybridKvCoder {
 public:
  explicit RawHybridCoder(const hybrid::HybridModel& model) : model_(model) {}
  std::string name() const override { return "raw"; }
  std::string codec_id() const override { return "raw"; }

  Result<std::vector<uint8_t>> EncodeChunk(std::span<const uint32_t>, const KvChunk& chunk, uint32_t begin,
                                           bool partial) const override {
    return BuildPayload(ChunkPayloadHeader(CodecId::kRaw, chunk.view(), begin, partial, model_.fingerprint()),
                        chunk.data);
  }

  Result<std::vector<uint8_t>> EncodeState(std::span<const uint32_t>, const RecurrentState& r) const override {
    return EncodeStateRecord(r, model_.fingerprint());
  }

  Result<hybrid::HybridState> Restore(std::span<const uint32_t>, std::span<const std::vector<uint8_t>> payloads,
                                      std::span<const uint8_t> record, double* predictor_ms) const override {
    if (predictor_ms) *predictor_ms = 0;
    return hybrid::RestoreStoredBoundary(model_, payloads, record);
  }

 private:
  const hybrid::HybridModel& model_;
};

}  // namespace

std::unique_ptr<HybridKvCoder> MakeRawHybridCoder(const hybrid::HybridModel& model) {
  return std::make_unique<RawHybridCoder>(model);
}

}  // namespace kvstash::demo
