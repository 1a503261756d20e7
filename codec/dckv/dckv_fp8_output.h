// The fp8 output of the dckv decoder: a decoded bf16 chunk (canonical layout,
// kvstash/kv_chunk.h) converted to the fp8 cache layout of vLLM-style engines:
// OCP E4M3FN values (kvstash/dtype.h) with one fp32 scale per (layer, K/V), K then V per
// layer, x' = float(q) * scale.
//
// Scales: either given (2 * n_layers values, each finite and > 0: a deployment's fixed
// k_scale / v_scale, as vLLM's) or, when empty, computed per (layer, K/V) tensor of the
// chunk as ComputeFp8Scale (amax / 448 of its values, vLLM's dynamic per-tensor
// scale; 1.0 for an all-zero tensor), the rule model/forward/kv_export.h uses for engine KV.
// Values: q = e4m3(fp32(v / scale)) for each bf16 value v (QuantizeFp8E4M3: round to
// nearest even, saturating at +-448, NaN kept NaN).
// Double rounding: the decoder rounds its fp32 reconstruction to bf16 first (the
// payload's content checksum is defined on, and verified against, the bf16 chunk),
// then to fp8. bf16 keeps 8 significant bits and e4m3 4, so the bf16 rounding can
// only move a value onto an fp8 rounding midpoint, never across one: the result
// differs from rounding the fp32 value directly only for values within half a bf16
// ulp (2^-9 relative) of a midpoint, and then by one fp8 step; the error is at most
// half an fp8 step plus half a bf16 ulp of the value.
//
// Errors: InvalidArgument for a chunk that is not a valid bf16 chunk, a scale count
// other than 0 or 2 * n_layers, or a scale that is not finite and > 0.
// Thread-safety: a pure function.
#pragma once

#include <span>

#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash::dckv {

Result<KvChunk> Bf16ChunkToFp8(const KvChunkView& chunk, std::span<const float> scales = {});

}  // namespace kvstash::dckv
