// Evaluation of the optional dckv correction nets (dckv_artifact.h DckvNet,
// docs/methods.md §2): one-hidden-layer GELU nets g(in) = W2 GELU(W1 in + b1) + b2.
//
// Decoder net g_d (normative, docs/format/dckv.md "Correction nets"): for one coded
// row with decoded coefficients c[n_active] and synthesis output x[dims]
// (dckv_synthesis.h), every step an fp32 operation rounded to nearest even, never a
// fused multiply-add:
//   1. a_k = b1[k], then for i = 0 .. n_active-1 with c_i != 0:
//        a_k = fp32(a_k + fp32(c_i * W1[k][i]))          (k = 0 .. hidden-1)
//   2. h_k = Gelu(a_k)                                      (dckv_gelu.h)
//   3. o_j = b2[j], then for k = 0 .. hidden-1 with h_k != 0:
//        o_j = fp32(o_j + fp32(h_k * W2[j][k]))            (j = 0 .. dims-1)
//   4. x_j = fp32(x_j + o_j)
// before RoPE and bf16 rounding. Steps 1 and 3 are the synthesis contract itself
// (basis W1^T with mean b1, and basis W2^T with mean b2), so they run on the same
// register-tiled kernel, bit-identical to the plain loop
// (ApplyDecoderCorrectionReference) on every path and machine.
// A zero last layer (W2 = 0, b2 = +-0) gives o_j = +-0, and x_j + (+-0) == x_j because
// x_j is never -0.0: CheckCorrectionNets refuses a -0.0 in the mean of a group with a
// decoder net, and sums that start from a value other than -0.0 never become -0.0
// under round to nearest. So such a net decodes exactly as no net.
//
// Encoder net g_e: y += W2e Gelu(W1e u + b1e) + b2e for u = e (x - mean), the row the
// projection sees. Computed with OpenBLAS GEMMs: the encoder need not be
// reproducible (the decoder only sees symbols).
//
// Thread-safety: pure functions; PackedDecoderNet is immutable after PackDecoderNet.
#pragma once

#include <cstdint>
#include <span>

#include "codec/dckv/dckv_artifact.h"
#include "codec/dckv/dckv_synthesis.h"
#include "kvstash/status.h"

namespace kvstash::dckv {

// InvalidArgument unless each of g's nets is empty (hidden 0, all vectors empty) or has
// 1 <= hidden <= kMaxCorrectionHidden, vectors of the shapes in dckv_artifact.h and
// finite weights and biases with |value| <= kMaxCorrectionWeight; and, when g has a
// decoder net, no -0.0 in g.mean (see above). REQUIRES g.mean.size() == g.dims.
Status CheckCorrectionNets(const DckvGroup& g);

// A decoder net's layers in the synthesis kernel's panels.
struct PackedDecoderNet {
  PackedBasis w1t;  // W1^T: n_active "components" of hidden values
  PackedBasis w2t;  // W2^T: hidden "components" of dims values
};

// REQUIRES net valid for (n_active, dims) (CheckCorrectionNets) and not empty.
PackedDecoderNet PackDecoderNet(const DckvNet& net, uint32_t n_active, uint32_t dims);

// Adds g_d(c) to x for rows [0, rows) (steps 1-4 above). coef [rows, n_active], x
// [rows, dims]. REQUIRES net/packed from the same valid net.
void ApplyDecoderCorrection(const PackedDecoderNet& packed, const DckvNet& net, std::span<const float> coef,
                            uint32_t rows, std::span<float> x, SynthesisPath path = SynthesisPath::kAuto);

// The defining loops, one value at a time (tests and documentation).
void ApplyDecoderCorrectionReference(const DckvNet& net, uint32_t n_active, uint32_t dims,
                                     std::span<const float> coef, uint32_t rows, std::span<float> x);

// y[rows, n_active] += g_e(u) for u [rows, dims]. REQUIRES net valid and not empty.
void AddEncoderCorrection(const DckvNet& net, uint32_t dims, uint32_t n_active, std::span<const float> u,
                          uint32_t rows, std::span<float> y);

}  // namespace kvstash::dckv
