// The dckv codec artifact: everything the encoder and decoder share for one model
// and one rate point (docs/methods.md §2; one artifact per rate point).
//
// Rows: one token position of a group of `group_layers` consecutive attention layers,
//   x = [K_l (before RoPE) | V_l] for l in the group, each n_kv_heads * head_dim fp32,
//   so dims = 2 * layers_in_group * n_kv_heads * head_dim (the last group may hold
//   fewer layers). K and V share one basis.
// Transform per group: y_i = <basis_i, e * (x - mean)> with e = encode_scale (all 1
//   when empty: then the basis rows are orthonormal PCA directions), or, when the group
//   has an explicit encoder basis (a trained codec, dckv_trained.h: its encoder W_e may
//   differ from its decoder basis W_d), y_i = <encoder_basis_i, x - mean> (no encode
//   scale then). The decoder never reads the encoder basis. A weighted basis
//   (dckv_calibration.h, DckvFitOptions::output_weight) has basis_i = u_i / sqrt(w) and
//   e = w for orthonormal u_i, so encoder and decoder agree: x - mean = sum_i y_i basis_i
//   over all components. Component i is quantised as s_i = round((y_i - mu_i) / step_i) around
//   the centre mu_i predicted by the conditional models (dckv_conditional.h: token
//   map for even coded rows, checkerboard context map for odd ones) and entropy coded
//   with table `table_index[i]` (even rows) or `odd_table_index[i]` (odd rows) of
//   `tables` (a zero-centred Laplace pmf integrated over the quantisation cell, chosen
//   by the scale bucket of the component's residual |y_i - mu_i| in that pass). Only
//   the active components (scale / step >= threshold at calibration) are stored.
//   Decoding: c_i = mu_i + s_i step_i, x^ = mean + sum_i c_i basis_i, then RoPE
//   re-applied to the K parts.
// Conditioning: the reduced token embeddings z (rank values per vocabulary entry,
//   bf16: the centred token embedding projected on its top `rank` principal
//   directions, fitted at calibration). rank 0: no token conditioning (token_map is
//   then only its bias row).
// Raw positions: the first `raw_head` positions of a stored prefix and its last
//   `raw_tail` positions are stored as bf16 rows (see dckv_codec.h for chunks).
// Correction nets (optional, per group; docs/methods.md §2): one-hidden-layer GELU nets
//   (dckv_gelu.h) added to the linear transform: encoder y = <basis_i, e (x - mean)>
//   + g_e(e (x - mean))_i (with an encoder basis: <encoder_basis_i, x - mean>
//   + g_e(x - mean)_i), decoder x^ = mean + sum_i c_i basis_i + g_d(c), with
//   g(in) = W2 GELU(W1 in + b1) + b2 (dckv_correction.h has the exact fp32 evaluation
//   order of g_d). Written by a trainer; calibration writes none.
//
// Byte layout (little-endian), version 5 when any group has an encoder basis, else
// version 4 when any group has a correction net, else version 3, byte for byte as
// before (version 2 had no encode_scale):
//   u32 magic "DCKA", u16 version, u16 reserved 0,
//   u32 n_layers, u32 n_kv_heads, u32 head_dim, f32 rope_theta,
//   u32 group_layers, u32 raw_head, u32 raw_tail, f32 target_ratio,
//   u32 vocab, u32 rank, bf16 embed[vocab][rank],
//   u32 n_groups, per group: u32 first_layer, u32 layers, u32 dims, u32 n_active,
//     f32 mean[dims], u32 has_encode_scale (0 or 1), f32 encode_scale[dims] when 1,
//     f32 basis[n_active][dims], f32 step[n_active],
//     u16 table_index[n_active], u16 odd_table_index[n_active],
//     f32 token_map[rank + 1][n_active],
//     u32 context_rows (0 or k + rank + 1, 1 <= k <= n_active), f32 context_map[context_rows][n_active],
//     versions 4 and 5: the decoder net, then the encoder net, each
//       u32 hidden H (0: no net; at most kMaxCorrectionHidden), when H > 0:
//       f32 w1[H][in], f32 b1[H], f32 w2[out][H], f32 b2[out]
//     (decoder: in = n_active, out = dims; encoder: in = dims, out = n_active;
//     weights in PyTorch nn.Linear order [out][in]),
//     version 5 only: u32 has_encoder_basis (0 or 1; 1 needs has_encode_scale 0),
//       f32 encoder_basis[n_active][dims] when 1,
//   u32 table-set bytes, TableSet::Serialize() bytes,
//   u64 XXH3-64 of everything before it.
// The digest placed in payload headers is SHA-256 of the whole serialised artifact.
//
// Errors: Parse returns Corruption for any malformed, truncated or inconsistent input
// (checksum, shape, table index out of range, non-finite or non-positive steps, a
// correction net that CheckCorrectionNets refuses, a version 4 artifact without any
// net or with an encoder basis, a version 5 artifact without any encoder basis, an
// encoder basis beside an encode scale: each would not serialise to the same bytes)
// and Mismatch for an unknown version (1, 2, 6, ...). Versions 3, 4 and 5 parse.
// Thread-safety: a value type; const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "codec/entropy/table_set.h"
#include "kvstash/prefix_key.h"
#include "kvstash/result.h"

namespace kvstash::dckv {

inline constexpr uint32_t kArtifactMagic = 0x414B4344;  // "DCKA"
// The version Serialize writes: kArtifactVersionEncoderBasis when any group has an
// encoder basis, else kArtifactVersionCorrection when any group has a correction net,
// else kArtifactVersion (so artifacts without them keep their bytes and digests).
inline constexpr uint16_t kArtifactVersion = 3;
inline constexpr uint16_t kArtifactVersionCorrection = 4;
inline constexpr uint16_t kArtifactVersionEncoderBasis = 5;
// Limits of a correction net (dckv_correction.h CheckCorrectionNets): hidden units, and
// |weight| (with activations clamped to +-16384 this keeps every sum far from fp32
// overflow, so a net never produces inf or NaN).
inline constexpr uint32_t kMaxCorrectionHidden = 4096;
inline constexpr float kMaxCorrectionWeight = 4294967296.0f;  // 2^32

// One-hidden-layer GELU net g(in) = w2 GELU(w1 in + b1) + b2 (see above). hidden 0 =
// no net (all vectors empty).
struct DckvNet {
  uint32_t hidden = 0;
  std::vector<float> w1;  // [hidden, inputs]
  std::vector<float> b1;  // [hidden]
  std::vector<float> w2;  // [outputs, hidden]
  std::vector<float> b2;  // [outputs]
  bool empty() const { return hidden == 0; }
};

// Reduced token embeddings of the conditional models (see above).
struct DckvConditioning {
  uint32_t vocab = 0, rank = 0;
  std::vector<uint16_t> embed_bf16;  // [vocab, rank]
};

struct DckvGroup {
  uint32_t first_layer = 0;
  uint32_t layers = 0;
  uint32_t dims = 0;                  // 2 * layers * n_kv_heads * head_dim
  std::vector<float> mean;            // [dims]
  // Encoder scale e [dims] (weighted PCA), each finite and > 0, or empty (all 1).
  std::vector<float> encode_scale;
  std::vector<float> basis;           // [n_active, dims] decoder rows
  // Encoder rows W_e [n_active, dims], finite, or empty (the encoder projects on
  // `basis` with encode_scale). Non-empty needs encode_scale empty.
  std::vector<float> encoder_basis;
  std::vector<float> step;            // [n_active], > 0
  std::vector<uint16_t> table_index;  // [n_active], < tables.size(): even coded rows
  std::vector<uint16_t> odd_table_index;  // [n_active]: odd coded rows
  std::vector<float> token_map;       // [rank + 1, n_active], last row the bias
  uint32_t context_inputs = 0;        // k: neighbour components the context map reads
  std::vector<float> context_map;     // [k + rank + 1, n_active] or empty (k = 0)
  DckvNet decoder_net;                // g_d: inputs n_active, outputs dims, or empty
  DckvNet encoder_net;                // g_e: inputs dims, outputs n_active, or empty
  uint32_t n_active() const { return static_cast<uint32_t>(step.size()); }
};

struct DckvArtifact {
  uint32_t n_layers = 0, n_kv_heads = 0, head_dim = 0;
  float rope_theta = 10000.0f;
  uint32_t group_layers = 0;
  uint32_t raw_head = 4;
  uint32_t raw_tail = 128;
  float target_ratio = 0.0f;  // the rate point it was calibrated for (informational)
  DckvConditioning conditioning;
  std::vector<DckvGroup> groups;
  // 16-bit two's-complement alphabet; never null in a parsed or calibrated artifact.
  std::shared_ptr<const entropy::TableSet> tables;

  // Values per row of layer l's K (or V): n_kv_heads * head_dim.
  uint32_t HeadRow() const { return n_kv_heads * head_dim; }
  // Active components over all groups (= symbols per coded token).
  uint64_t ActiveComponents() const;
  // Whether any group has a decoder or encoder net (then Serialize writes version 4).
  bool HasCorrection() const;
  // Whether any group has a decoder net (changes the decoded values).
  bool HasDecoderCorrection() const;
  // Whether any group has an explicit encoder basis (then Serialize writes version 5).
  bool HasEncoderBasis() const;

  std::vector<uint8_t> Serialize() const;
  static Result<DckvArtifact> Parse(std::span<const uint8_t> bytes);
  // SHA-256 of Serialize(): the artifact digest of payload headers.
  Digest256 Digest() const;
};

}  // namespace kvstash::dckv
