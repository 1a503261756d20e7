// KVTC-like baseline (lossy): PCA transform per layer group, bit allocation over the
// components, uniform scalar quantisation, then a general-purpose lossless coder
// (zstd), after Staniszewski et al., "KV Cache Transform Coding" (KVTC, 2025). It is
// the comparison point for the dckv codec (codec/dckv/), so it shares dckv's rows
// (K before RoPE and V of a layer group, positions), its PCA (dckv::FitDckvBasis) and
// its raw head/tail rule (dckv_codec.h), and differs in what KVTC does differently:
//   - bit allocation: component i gets b_i in 0..kMaxBits bits, minimising
//     sum_i lambda_i D(b_i) under sum_i b_i <= budget (budget = bf16 bits per token /
//     target_ratio), D(b) the distortion per unit variance of the optimal uniform
//     quantiser of a Gaussian with 2^b levels (J. Max 1960, Table; b > 8: D/4 per
//     extra bit). KVTC solves this by dynamic programming; since D(b) is convex the
//     marginal-return greedy used here (one bit at a time to the largest
//     lambda_i (D(b_i) - D(b_i + 1))) reaches the same optimum and runs in
//     O(budget log n) instead of O(n budget) memory.
//   - quantiser: midrise, q = clamp(floor(y / step_i), -2^(b-1), 2^(b-1) - 1),
//     y^ = (q + 1/2) step_i with step_i = sqrt(lambda_i) * s(b_i) (Max's optimal step).
//   - coding: the b_i-bit fields of all coded positions packed LSB-first, then zstd
//     (level 3; KVTC uses DEFLATE through nvCOMP).
// Payload: kvstash/payload_format.h, codec kKvtc, flag lossy; artifact digest = SHA-256
// of the model's allocation (KvtcModel::Digest). Body: u32 raw_head_rows, u32
// raw_tail_rows, u32 coded_rows, raw bf16 rows as in dckv_codec.h, u64 packed bytes,
// then the zstd frame. The model is built in memory by the benchmark (no file).
//
// Errors: as dckv_codec.h (InvalidArgument for bad input, Corruption / Mismatch for
// bad payloads). Thread-safety: a KvtcCodec is immutable.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/dckv/dckv_calibration.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/prefix_key.h"
#include "kvstash/result.h"

namespace kvstash::baselines {

struct KvtcGroup {
  uint32_t first_layer = 0, layers = 0, dims = 0;
  std::vector<float> mean;     // [dims]
  std::vector<float> basis;    // [n, dims] components with bits > 0
  std::vector<float> step;     // [n]
  std::vector<uint8_t> bits;   // [n], 1..kMaxBits
};

class KvtcCodec {
 public:
  static constexpr int kMaxBits = 12;
  // Allocates bits for `target_ratio` (> 1) over the components of `basis`.
  static Result<KvtcCodec> Create(const dckv::DckvBasis& basis, double target_ratio, float rope_theta,
                                  uint32_t raw_head, uint32_t raw_tail);
  uint64_t BitsPerToken() const;
  const Digest256& digest() const { return digest_; }

  Result<std::vector<uint8_t>> Encode(const KvChunkView& chunk, uint32_t token_offset,
                                      uint32_t prefix_tokens, const Digest256& model_fingerprint) const;
  Result<KvChunk> Decode(std::span<const uint8_t> payload, const Digest256& model_fingerprint) const;

 private:
  KvtcCodec() = default;
  uint32_t n_layers_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
  float rope_theta_ = 10000.0f;
  uint32_t raw_head_ = 0, raw_tail_ = 0;
  std::vector<KvtcGroup> groups_;
  Digest256 digest_{};
};

}  // namespace kvstash::baselines
