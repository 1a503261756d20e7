#include "codec/dckv/dckv_fp8_output.h"

#include <cmath>
#include <vector>

#include "common/byte_io.h"
#include "kvstash/dtype.h"

namespace kvstash::dckv {

Result<KvChunk> Bf16ChunkToFp8(const KvChunkView& chunk, std::span<const float> scales) {
  KVSTASH_RETURN_IF_ERROR(chunk.Validate());
  if (chunk.layout.dtype != DType::kBF16) return Status::InvalidArgument("dckv fp8 output: input must be bf16");
  const uint32_t L = chunk.layout.n_layers;
  if (!scales.empty() && scales.size() != 2ull * L) {
    return Status::InvalidArgument("dckv fp8 output: want 0 or 2 * n_layers scales");
  }
  for (float s : scales) {
    if (!(std::isfinite(s) && s > 0.0f)) return Status::InvalidArgument("dckv fp8 output: scale must be finite and > 0");
  }
  KvLayout layout = chunk.layout;
  layout.dtype = DType::kFP8E4M3;
  KvChunk out = KvChunk::Zeros(layout, chunk.tokens);
  const uint64_t n = chunk.layout.ScalarsPerTensor(chunk.tokens);
  std::vector<uint16_t> bf16(n);
  std::vector<float> values(n);
  for (uint32_t l = 0; l < L; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const std::span<const uint8_t> src = kv == 0 ? chunk.K(l) : chunk.V(l);
      for (uint64_t i = 0; i < n; ++i) bf16[i] = LoadLe<uint16_t>(src.data() + 2 * i);
      KVSTASH_RETURN_IF_ERROR(ConvertBf16ToF32(bf16, values));
      const float scale = scales.empty() ? ComputeFp8Scale(values) : scales[2 * l + kv];
      out.scales[2 * l + kv] = scale;
      KVSTASH_RETURN_IF_ERROR(QuantizeFp8E4M3(values, scale, kv == 0 ? out.MutableK(l) : out.MutableV(l)));
    }
  }
  return out;
}

}  // namespace kvstash::dckv
