// Conversion between the runtime's fp32 KvCache and the canonical KvChunk
// (kvstash/kv_chunk.h) that codecs and the store consume.
//
// ToKvChunk copies tokens [begin, end) of every layer, K then V, converting each
// fp32 value with kvstash/dtype.h: bf16 and f16 round to nearest even; fp8_e4m3 is
// q = e4m3(x / scale) with one fp32 scale per (layer, K/V), as vLLM's fp8 KV cache.
// The scales are either given (2 * n_layers values, K then V per layer: a deployment
// fixes them once, like vLLM's k_scale / v_scale) or, when empty, computed from the
// copied values as amax / 448 (common ComputeFp8Scale, vLLM's dynamic per-tensor
// scale).
// FromKvChunk is the inverse (exact for f32, the dtype's value otherwise); a cache hit
// restores the cache with it and continues with Prefill.
//
// Errors: InvalidArgument for an empty or out-of-range token range, an unsupported
// dtype, a scale count that is not 2 * n_layers or a non-positive scale.
// Thread-safety: pure functions.
#pragma once

#include <span>

#include "kvstash/kv_chunk.h"
#include "model/forward/kv_cache.h"

namespace kvstash::model {

Result<KvChunk> ToKvChunk(const KvCache& cache, uint32_t begin, uint32_t end, DType dtype,
                          std::span<const float> fp8_scales = {});

Result<KvCache> FromKvChunk(const KvChunkView& chunk);

// Appends `more` (same shape) to `cache`. InvalidArgument if the shapes differ.
Status AppendKv(const KvCache& more, KvCache* cache);

}  // namespace kvstash::model
