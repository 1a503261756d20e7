// The dckv conditional entropy models (docs/methods.md §2 (a) and (b)): the predicted
// centre mu of every coded coefficient, computed identically by the encoder and the
// decoder. A coefficient y_i is coded as s_i = round((y_i - mu_i) / step_i) with a
// zero-centred Laplace table and reconstructed as c_i = mu_i + s_i * step_i, so the
// prediction shifts the Laplace centre (and the quantisation grid with it).
//
// (a) Token-conditioned mean, every coded position: z = the position's reduced token
//     embedding (DckvArtifact::conditioning, `rank` values, bf16 widened to fp32),
//       mu_i = token_map[rank][i] + sum_{k < rank} z_k * token_map[k][i].
// (b) Checkerboard context, odd coded rows of a chunk (row index r counted from the
//     chunk's first coded row): n = the mean of the first k = context_inputs decoded
//     coefficients of rows r - 1 and r + 1 (just row r - 1's when r + 1 is not a
//     coded row; the components are by decreasing variance, so the map has rank
//     <= k + rank), and u = [n (k) | z (rank)],
//       mu_i = context_map[k + rank][i] + sum_j u_j * context_map[j][i].
//     Even rows use (a) alone, so decoding takes two token-parallel passes: all even
//     rows, then all odd rows. A group without a context map uses (a) for odd rows too.
// Without token ids (Encode without tokens) z is the zero vector: the reduced
// embeddings are centred, so z = 0 is the calibration tokens' mean embedding.
//
// Determinism: every sum runs in the order written above (bias first, then k
// ascending) in fp32; with -ffp-contract=off the result is bit-identical wherever it
// is computed, which the entropy-coded round trip relies on.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

#include "codec/dckv/dckv_artifact.h"
#include "codec/dckv/dckv_synthesis.h"

namespace kvstash::dckv {

// The reduced embedding of `token` (REQUIRES token < vocab) into z[rank].
void TokenEmbedding(const DckvConditioning& cond, uint32_t token, std::span<float> z);

// mu[n_active] of (a) for group g. z: [rank] (all zeros without token ids).
void PredictTokenMean(const DckvGroup& g, uint32_t rank, std::span<const float> z, std::span<float> mu);

// Both models for `count` rows at once (the decoder's token-parallel passes): with
// map [inputs + 1, n_active] (last row the bias) and u [count, inputs],
//   mu[b][i] = map[inputs][i] + sum_{j ascending, u[b][j] != 0} u[b][j] * map[j][i],
// the same fp32 operations, in the same order, as the one-row functions:
// (a) is map = token_map, inputs = rank, u = z; (b) is map = context_map,
// inputs = k + rank, u = [n | z]. mu: [count, n_active].
// REQUIRES map.size() >= (inputs + 1) * n_active, u.size() >= count * inputs,
// mu.size() >= count * n_active, mu overlapping neither map nor u. Bit-identity across
// paths holds for finite map and u (what artifacts and decoded coefficients are); with
// NaNs the result is NaN on every path, its payload unspecified. path picks the ISA as SynthesizeRows' does
// (kAuto: the widest this CPU and KVSTASH_CPU_PATH allow; kAvx512 without AVX-512 runs AVX2, and either
// without AVX2 the portable loop); every path gives the same bits (dckv_predict_rows_internal.h:
// register-tiled, 8 rows x 32 columns with AVX-512).
void PredictRows(std::span<const float> map, uint32_t inputs, uint32_t n_active, std::span<const float> u,
                 uint32_t count, std::span<float> mu, SynthesisPath path = SynthesisPath::kAuto);

// mu[n_active] of (b) for group g (REQUIRES !g.context_map.empty()).
// prev, next: decoded coefficient vectors of the neighbouring even rows (next may be
// empty: row r + 1 is not coded). z: [rank].
void PredictContextMean(const DckvGroup& g, uint32_t rank, std::span<const float> prev,
                        std::span<const float> next, std::span<const float> z, std::span<float> mu);

}  // namespace kvstash::dckv
