#include "codec/dckv/dckv_chunk_rows.h"

#include <bit>
#include <string>

#include "codec/dckv/dckv_rope.h"
#include "common/byte_io.h"
#include "kvstash/dtype.h"

namespace kvstash::dckv {
namespace {

// Value i of a bf16, f16 or f32 tensor, widened exactly.
float Load(const uint8_t* p, DType dtype, uint64_t i) {
  if (dtype == DType::kF32) return std::bit_cast<float>(LoadLe<uint32_t>(p + 4 * i));
  if (dtype == DType::kF16) return F16ToF32(LoadLe<uint16_t>(p + 2 * i));
  return Bf16ToF32(LoadLe<uint16_t>(p + 2 * i));
}

}  // namespace

Status AppendChunkRows(const KvChunkView& chunk, uint32_t first_position, uint32_t skip, float rope_theta,
                       DckvRows* rows) {
  KVSTASH_RETURN_IF_ERROR(chunk.Validate());
  const KvLayout& L = chunk.layout;
  if (L.dtype != DType::kBF16 && L.dtype != DType::kF16 && L.dtype != DType::kF32) {
    return Status::InvalidArgument("dckv rows: the chunk's dtype is not bf16, f16 or f32");
  }
  if (rows == nullptr || L.n_layers != rows->n_layers || L.n_kv_heads != rows->n_kv_heads ||
      L.head_dim != rows->head_dim || rows->k.size() != L.n_layers || rows->v.size() != L.n_layers) {
    return Status::InvalidArgument("dckv rows: the chunk's shape is not the rows' (" +
                                   std::to_string(L.n_layers) + " layers x " + std::to_string(L.n_kv_heads) +
                                   " x " + std::to_string(L.head_dim) + ")");
  }
  if (L.head_dim % 2 != 0 || !(rope_theta > 0)) {
    return Status::InvalidArgument("dckv rows: RoPE needs an even head_dim and theta > 0");
  }
  if (skip >= chunk.tokens) return Status::Ok();
  const uint32_t n = chunk.tokens - skip;
  const uint64_t hr = static_cast<uint64_t>(L.n_kv_heads) * L.head_dim;
  const RopeTable rope(L.head_dim, rope_theta, first_position + skip, n);
  for (uint32_t l = 0; l < L.n_layers; ++l) {
    const uint8_t* k = chunk.K(l).data();
    const uint8_t* v = chunk.V(l).data();
    auto& kl = rows->k[l];
    auto& vl = rows->v[l];
    const size_t k0 = kl.size(), v0 = vl.size();
    kl.resize(k0 + n * hr);
    vl.resize(v0 + n * hr);
    for (uint32_t r = 0; r < n; ++r) {
      const uint64_t src = static_cast<uint64_t>(skip + r) * hr;
      float* xk = kl.data() + k0 + r * hr;
      float* xv = vl.data() + v0 + r * hr;
      for (uint64_t c = 0; c < hr; ++c) {
        xk[c] = Load(k, L.dtype, src + c);
        xv[c] = Load(v, L.dtype, src + c);
      }
      for (uint32_t h = 0; h < L.n_kv_heads; ++h)
        rope.Rotate(xk + h * L.head_dim, first_position + skip + r, true);
    }
  }
  rows->rows += n;
  return Status::Ok();
}

}  // namespace kvstash::dckv
