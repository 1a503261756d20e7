// The dckv chunk codec (lossy): encodes a canonical KV chunk (kvstash/kv_chunk.h) into
// a payload (kvstash/payload_format.h, codec kDckv, flag lossy) and decodes it back to
// bf16 (f16 when the input was f16: the header's layout dtype) in the canonical layout (or, DecodeFp8, to the
// fp8 cache layout). Transform, quantiser and entropy tables come from a DckvArtifact (dckv_artifact.h).
//
// Encoding a chunk of T tokens at prefix positions [token_offset, token_offset + T) of
// a stored prefix of prefix_tokens tokens:
//   - raw head: positions p < artifact.raw_head (attention sinks) are stored as bf16
//     rows (f16 rows for f16 input: raw rows and the decoded chunk share one dtype). They live in the
//     prefix's first chunk(s); a chunk further in has none.
//   - raw tail: positions p >= prefix_tokens - artifact.raw_tail are stored as bf16
//     rows. Only the chunk(s) covering the end of the prefix at the time it is stored
//     have them; when a longer prefix is stored later, its new chunks are coded with
//     the new prefix_tokens and the earlier chunks keep their raw tail (still valid:
//     the decoder reads the split from the body, never from prefix_tokens).
//   - every other position is coded: K is rotated back to before RoPE (inverse RoPE at
//     its absolute position), the row of each layer group is projected on the basis,
//     quantised around the conditional models' predicted centre mu (dckv_conditional.h:
//     s = round((y - mu) / step), clamped to +-32767; even coded rows first, then odd
//     rows whose mu uses the decoded even neighbours) and rANS coded with the
//     component's even- or odd-row table (segmented streams,
//     codec/entropy/rans_segments.h).
// Token ids: the token-conditioned models need each coded position's token id. Encode
//   with `tokens` (the chunk's ids) stores the coded rows' ids in the body (2 bytes
//   each when the artifact's vocabulary has <= 65,536 entries, else 4; counted in the
//   payload size), so Decode(payload, fingerprint) needs nothing else. Encode without
//   tokens codes with z = 0 (the mean embedding: valid, but more bytes per token).
// Body layout (after the 136-byte payload header), little-endian:
//   u32 magic "DCKB", u32 raw_head_rows h, u32 raw_tail_rows t, u32 coded_rows c
//   (h + t + c = tokens, head rows are the chunk's first h rows, tail rows its last t),
//   u32 flags (bit 0: token ids present; other bits 0),
//   [u16 or u32 token id of each coded row, when bit 0 is set],
//   bf16 rows of the h + t raw positions, each position: for every layer K_l then V_l
//   (n_kv_heads * head_dim values each, K after RoPE as cached),
//   the segmented rANS stream of c * ActiveComponents() 16-bit symbols, token-major,
//   then group, then component (absent when c = 0).
// Decoding: pass 1 (even coded rows) and pass 2 (odd rows) give the coefficients
// c_i = mu_i + s_i step_i; x^ = mean + sum_i c_i basis_i per group (fp32, fixed
// summation order, dckv_synthesis.h: bit-identical on every machine built with
// -ffp-contract=off), plus the group's decoder correction net g_d(c) when the artifact
// has one (dckv_correction.h, same guarantee), RoPE re-applied to K, rounded to bf16
// (or f16: the header's layout dtype; round to nearest even either way).
// The encoder projects on the group's encoder basis when it has one (a trained codec;
// else on the basis with the encode scale) and adds the encoder net g_e when it has one. The header's content
// checksum is that of the decoded chunk, and the decoder verifies it.
// gpu_kernels/dckv_decode.h decodes the same payloads on a GPU to the same bytes.
// Speed: the synthesis runs as a register-tiled kernel (AVX-512 or AVX2 when the CPU
// has it; the multiplies and adds are nearly all of Reconstruct's time), the
// encoder's projection as an OpenBLAS GEMM, and both spread groups and blocks of rows
// over threads() threads; the work split never changes a value (each output value is
// computed by one thread in the contract's order).
//
// Errors: Encode: InvalidArgument for a chunk whose shape differs from the artifact's,
//   a dtype other than bf16/f16/f32, a token range outside the prefix. Decode: Mismatch for
//   another codec, artifact or model fingerprint; Corruption for any malformed body or
//   content checksum mismatch.
// Thread-safety: a DckvCodec is immutable; Encode/Decode may run concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/dckv/dckv_artifact.h"
#include "codec/dckv/dckv_correction.h"
#include "codec/dckv/dckv_synthesis.h"
#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash::dckv {

// The quantised form of one chunk (what the entropy coder carries, plus raw rows).
struct DckvQuantized {
  uint32_t tokens = 0;
  uint32_t raw_head_rows = 0, raw_tail_rows = 0;
  // Output dtype: bf16 (bf16 or f32 input) or f16 (f16 input, llama.cpp's cache type).
  DType out_dtype = DType::kBF16;
  // (h + t) * ScalarsPerToken bit patterns of out_dtype (bf16 or f16; the name predates
  // f16), layout as in the body.
  std::vector<uint16_t> raw_bf16;
  std::vector<uint16_t> symbols;    // coded_rows * ActiveComponents(), two's complement
  std::vector<uint32_t> token_ids;  // coded_rows ids, or empty (z = 0)
  uint32_t coded_rows() const { return tokens - raw_head_rows - raw_tail_rows; }
};

// A payload checked and split into its parts, the entropy-coded stream not yet
// decoded: the first step of ParsePayload, shared with the GPU decoder
// (gpu_kernels/dckv_decode.h), which decodes the stream on the device.
struct DckvParsedPayload {
  DckvQuantized q;                   // symbols empty (coded_rows() * ActiveComponents() to come)
  uint32_t token_offset = 0;         // the header's first prefix position
  uint64_t content_checksum = 0;     // the header's checksum of the decoded chunk
  std::span<const uint8_t> stream;   // segmented rANS stream inside the payload; empty when c = 0
};

class DckvCodec {
 public:
  // InvalidArgument if the artifact has no tables, its groups do not cover its layers,
  // or a correction net is malformed (CheckCorrectionNets).
  static Result<DckvCodec> Create(DckvArtifact artifact);

  const DckvArtifact& artifact() const { return artifact_; }
  // Threads one Encode/Decode call uses (default: the hardware threads, at most 8).
  // Results do not depend on it. Not thread-safe against concurrent Encode/Decode.
  uint32_t threads() const { return threads_; }
  void set_threads(uint32_t n) { threads_ = n == 0 ? 1 : n; }
  const Digest256& digest() const { return digest_; }
  // The decoded chunk layout: the artifact's shape in `dtype` (bf16 for bf16/f32 input,
  // f16 for f16 input; a payload's header says which).
  KvLayout OutputLayout(DType dtype = DType::kBF16) const;

  // Steps of Encode, exposed for tests and measurements.
  // tokens: the chunk's token ids (chunk.tokens of them) or empty.
  Result<DckvQuantized> Quantize(const KvChunkView& chunk, std::span<const uint32_t> tokens,
                                 uint32_t token_offset, uint32_t prefix_tokens) const;
  Result<DckvQuantized> Quantize(const KvChunkView& chunk, uint32_t token_offset,
                                 uint32_t prefix_tokens) const {
    return Quantize(chunk, {}, token_offset, prefix_tokens);
  }
  // Reconstructs the canonical bf16 chunk of `q` (token_offset: its first position).
  Result<KvChunk> Reconstruct(const DckvQuantized& q, uint32_t token_offset) const;

  // tokens: the chunk's token ids (chunk.tokens of them; InvalidArgument if the count
  // differs or an id is outside the artifact's vocabulary). Preferred form.
  Result<std::vector<uint8_t>> Encode(const KvChunkView& chunk, std::span<const uint32_t> tokens,
                                      uint32_t token_offset, uint32_t prefix_tokens,
                                      const Digest256& model_fingerprint) const;
  // Without token ids (z = 0, see above).
  Result<std::vector<uint8_t>> Encode(const KvChunkView& chunk, uint32_t token_offset,
                                      uint32_t prefix_tokens,
                                      const Digest256& model_fingerprint) const {
    return Encode(chunk, {}, token_offset, prefix_tokens, model_fingerprint);
  }
  // Checks a payload's header (Mismatch / Corruption as Decode) and splits its body
  // (Corruption when malformed); the returned stream points into `payload`.
  Result<DckvParsedPayload> SplitPayload(std::span<const uint8_t> payload,
                                         const Digest256& model_fingerprint) const;
  // Parses a payload down to its quantised form (symbols decoded, not reconstructed).
  Result<DckvQuantized> ParsePayload(std::span<const uint8_t> payload,
                                     const Digest256& model_fingerprint,
                                     uint32_t* token_offset) const;
  Result<KvChunk> Decode(std::span<const uint8_t> payload,
                         const Digest256& model_fingerprint) const;
  // Decode, then the fp8 cache layout (dckv_fp8_output.h): the content checksum is
  // verified on the bf16 chunk first. scales: 2 * n_layers fixed per-(layer, K/V)
  // scales, or empty for amax / 448 per tensor. InvalidArgument for bad scales.
  Result<KvChunk> DecodeFp8(std::span<const uint8_t> payload, const Digest256& model_fingerprint,
                            std::span<const float> scales = {}) const;

 private:
  DckvCodec() = default;
  DckvArtifact artifact_;
  Digest256 digest_{};
  uint32_t threads_ = 1;
  // Table index of each symbol of one even / odd coded row.
  std::vector<uint16_t> even_tables_, odd_tables_;
  // Each group's basis in the synthesis kernel's panels, and its decoder net's layers
  // (empty when it has none).
  std::vector<PackedBasis> packed_;
  std::vector<PackedDecoderNet> packed_nets_;
  // Coefficients c [rows, n_active] of group g in two passes (dckv_conditional.h).
  // symbols: [rows, ActiveComponents()], the group's from symbol_offset. Encoder: y
  // [rows, n_active] given, writes the symbols; decoder: y null, only reads them.
  void CodeGroup(size_t group, uint64_t symbol_offset, const std::vector<float>& z, uint32_t rows,
                 const float* y, uint16_t* symbols, std::vector<float>* c) const;
  std::vector<uint16_t> SymbolTables(uint32_t coded_rows) const;
  // Token ids take 4 bytes in the body when the vocabulary exceeds 16 bits.
  bool WideTokenIds() const { return artifact_.conditioning.vocab > 65536; }
};

}  // namespace kvstash::dckv
