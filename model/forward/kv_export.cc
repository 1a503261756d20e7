#include "model/forward/kv_export.h"

#include <cstring>
#include <string>

#include "kvstash/dtype.h"

namespace kvstash::model {
namespace {

// Writes n fp32 values as `dtype` into dst (DTypeSize(dtype) * n bytes).
Status Encode(std::span<const float> src, DType dtype, float scale, uint8_t* dst) {
  const size_t n = src.size();
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src.data(), n * 4);
      return Status::Ok();
    case DType::kBF16:
    case DType::kF16: {
      std::vector<uint16_t> tmp(n);
      KVSTASH_RETURN_IF_ERROR(dtype == DType::kBF16 ? ConvertF32ToBf16(src, tmp) : ConvertF32ToF16(src, tmp));
      std::memcpy(dst, tmp.data(), n * 2);
      return Status::Ok();
    }
    case DType::kFP8E4M3:
      return QuantizeFp8E4M3(src, scale, std::span<uint8_t>(dst, n));
    default:
      return Status::InvalidArgument("KV export: dtype " + std::string(DTypeName(dtype)) + " is not a KV dtype");
  }
}

Status DecodeTo(std::span<const uint8_t> src, DType dtype, float scale, std::span<float> dst) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst.data(), src.data(), dst.size() * 4);
      return Status::Ok();
    case DType::kBF16:
    case DType::kF16: {
      std::vector<uint16_t> tmp(dst.size());
      std::memcpy(tmp.data(), src.data(), dst.size() * 2);
      return dtype == DType::kBF16 ? ConvertBf16ToF32(tmp, dst) : ConvertF16ToF32(tmp, dst);
    }
    case DType::kFP8E4M3:
      return DequantizeFp8E4M3(src, scale, dst);
    default:
      return Status::InvalidArgument("KV import: dtype is not a KV dtype");
  }
}

}  // namespace

Result<KvChunk> ToKvChunk(const KvCache& cache, uint32_t begin, uint32_t end, DType dtype,
                          std::span<const float> fp8_scales) {
  if (begin >= end || end > cache.tokens) {
    return Status::InvalidArgument("KV export: token range [" + std::to_string(begin) + ", " + std::to_string(end) +
                                   ") is empty or outside the cache of " + std::to_string(cache.tokens));
  }
  KvLayout layout{cache.n_layers, cache.n_kv_heads, cache.head_dim, dtype};
  KVSTASH_RETURN_IF_ERROR(layout.Validate());
  if (dtype == DType::kFP8E4M3 && !fp8_scales.empty() && fp8_scales.size() != 2ull * cache.n_layers) {
    return Status::InvalidArgument("KV export: want 2 * n_layers fp8 scales");
  }
  KvChunk chunk = KvChunk::Zeros(layout, end - begin);
  const uint64_t row = cache.RowFloats();
  const uint64_t n = (end - begin) * row;
  for (uint32_t l = 0; l < cache.n_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const std::vector<float>& src = kv == 0 ? cache.k[l] : cache.v[l];
      std::span<const float> part(src.data() + begin * row, n);
      float scale = 1.0f;
      if (dtype == DType::kFP8E4M3) {
        scale = fp8_scales.empty() ? ComputeFp8Scale(part) : fp8_scales[2 * l + kv];
        chunk.scales[2 * l + kv] = scale;
      }
      std::span<uint8_t> dst = kv == 0 ? chunk.MutableK(l) : chunk.MutableV(l);
      KVSTASH_RETURN_IF_ERROR(Encode(part, dtype, scale, dst.data()));
    }
  }
  return chunk;
}

Result<KvCache> FromKvChunk(const KvChunkView& chunk) {
  KVSTASH_RETURN_IF_ERROR(chunk.Validate());
  KvCache cache;
  cache.n_layers = chunk.layout.n_layers;
  cache.n_kv_heads = chunk.layout.n_kv_heads;
  cache.head_dim = chunk.layout.head_dim;
  cache.tokens = chunk.tokens;
  cache.k.resize(cache.n_layers);
  cache.v.resize(cache.n_layers);
  const uint64_t n = chunk.tokens * cache.RowFloats();
  for (uint32_t l = 0; l < cache.n_layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      std::vector<float>& dst = kv == 0 ? cache.k[l] : cache.v[l];
      dst.resize(n);
      const float scale = chunk.layout.dtype == DType::kFP8E4M3 ? chunk.scales[2 * l + kv] : 1.0f;
      KVSTASH_RETURN_IF_ERROR(DecodeTo(kv == 0 ? chunk.K(l) : chunk.V(l), chunk.layout.dtype, scale, dst));
    }
  }
  return cache;
}

Status AppendKv(const KvCache& more, KvCache* cache) {
  if (more.n_layers != cache->n_layers || more.n_kv_heads != cache->n_kv_heads ||
      more.head_dim != cache->head_dim || more.k.size() != cache->k.size()) {
    return Status::InvalidArgument("KV append: caches have different shapes");
  }
  for (uint32_t l = 0; l < cache->n_layers; ++l) {
    cache->k[l].insert(cache->k[l].end(), more.k[l].begin(), more.k[l].end());
    cache->v[l].insert(cache->v[l].end(), more.v[l].begin(), more.v[l].end());
  }
  cache->tokens += more.tokens;
  return Status::Ok();
}

}  // namespace kvstash::model
