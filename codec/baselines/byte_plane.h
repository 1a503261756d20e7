// Byte-plane rANS: the model-free lossless baseline (ZipNN-style byte grouping plus an
// entropy coder; Hershcovitch et al., "ZipNN", 2024).
//
// The canonical chunk bytes are split into planes by byte position within an element
// (bf16: low byte plane, high byte plane; f32: four planes; fp8: one plane). Each plane
// gets an order-0 frequency table built from its own histogram (entropy::BuildTable,
// precision 12) and is rANS-coded with it. No calibration, no model: what a general
// lossless tensor compressor achieves on the same bytes.
//
// Body (codec id 3): u32 planes, then per plane: u32 table bytes, table
// (FrequencyTable::Serialize), u32 stream bytes, rANS stream; then for fp8 the scales
// as f32. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/kv_chunk.h"
#include "kvstash/payload_format.h"

namespace kvstash::baselines {

// The byte planes of `data` (elements of `width` bytes, little-endian): plane p holds
// byte p of every element, planes one after another ([width][n]). `data.size()` must
// be a multiple of `width`. MergeBytePlanes is the inverse (planes.size() == out.size()).
std::vector<uint8_t> SplitBytePlanes(std::span<const uint8_t> data, size_t width);
void MergeBytePlanes(std::span<const uint8_t> planes, size_t width, std::span<uint8_t> out);

// A complete payload (header + body). Errors: InvalidArgument for an invalid chunk.
Result<std::vector<uint8_t>> EncodeBytePlanePayload(const KvChunkView& chunk,
                                                    const Digest256& model_fingerprint,
                                                    uint32_t token_offset);
// Errors: Corruption for a damaged payload or content checksum mismatch; Mismatch for
// another codec.
Result<KvChunk> DecodeBytePlanePayload(std::span<const uint8_t> payload);

}  // namespace kvstash::baselines
