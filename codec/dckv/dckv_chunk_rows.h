// dckv calibration rows from a canonical KV chunk (kvstash/kv_chunk.h): what an engine
// stores (K after RoPE at absolute positions, in its cache dtype) turned into the rows
// FitDckvBasis fits (dckv_calibration.h: K before RoPE and V, fp32), with the same
// conversion the encoder applies before its projection (dckv_codec.h): each value
// widened exactly to fp32 (bf16, f16 or f32), then every K head rotated back with the
// codec's inverse RoPE (RopeTable::Rotate(..., inverse = true), dckv_rope.h) at its
// absolute position. So a basis fitted on an engine's own cache (e.g. llama.cpp's f16
// KV) sees exactly the rows the encoder will project. The rotation is orthogonal: the
// rows differ from the true pre-RoPE K by the cache's rounding (at most 2^-11 relative
// per pair for f16, 2^-8 for bf16) plus fp32 rounding of the rotation.
//
// Errors: InvalidArgument for an invalid chunk, a dtype other than bf16/f16/f32, a
// shape other than the rows' (n_layers, n_kv_heads, head_dim), an odd head_dim,
// theta <= 0, or rows whose K/V vectors are not one per layer. Nothing is appended on
// error.
// Thread-safety: pure; `rows` is the caller's.
#pragma once

#include <cstdint>

#include "codec/dckv/dckv_calibration.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/status.h"

namespace kvstash::dckv {

// Appends positions [skip, chunk.tokens) of `chunk` to `rows` (rows->rows grows by
// chunk.tokens - skip; nothing when skip >= chunk.tokens). Chunk position t sits at
// absolute position first_position + t (the RoPE angle). Token ids and document row
// counts are the caller's to append.
Status AppendChunkRows(const KvChunkView& chunk, uint32_t first_position, uint32_t skip, float rope_theta,
                       DckvRows* rows);

}  // namespace kvstash::dckv
