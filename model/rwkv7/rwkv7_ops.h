// fp32 building blocks of the RWKV-7 forward (model/rwkv7/rwkv7_model.h), each with
// its operation order written down, so that the CPU reference is reproducible
// bit-for-bit on any compiler (the build uses -ffp-contract=off: no fused multiply-add).
//
// Conventions: all arithmetic is IEEE binary32; a matrix W with `rows` x `cols` is
// row-major, W[o * cols + i]; exp/tanh are the C library's (std::exp, std::tanh on
// float). Sums of n terms accumulate in index order from 0.0f, except dot products
// (Dot), which use 8 lanes so that compilers can vectorise them without reordering.
//
// Source of the equations: BlinkDL/RWKV-LM RWKV-v7/rwkv_v7_numpy.py (the x070
// reference in numpy); checked against rwkv.cpp's expected logits for its tiny RWKV-7
// (tests/model/rwkv7). See docs/models/rwkv7.md.
//
// Thread-safety: pure functions on caller-owned memory.
// REQUIRES (all functions): spans sized as documented; outputs do not alias inputs
// unless stated. Checked only by the callers (Rwkv7Model validates shapes at load).
#pragma once

#include <cstddef>
#include <span>

namespace kvstash::rwkv7 {

// sum_i a[i] * b[i] over n terms in 8 lanes: lane l = sum over i = l, l+8, ... (in
// order, i < n - n % 8), combined as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), then the last
// n % 8 products added in order.
float Dot(const float* a, const float* b, size_t n);

// out[o] = Dot(W row o, x), o < out.size().
// REQUIRES: W.size() == out.size() * x.size().
void MatVec(std::span<const float> W, std::span<const float> x, std::span<float> out);

// Layer normalisation over the whole vector (torch.nn.functional.layer_norm):
//   mean = (sum x) / n;  var = (sum (x - mean)^2) / n          (two passes)
//   out[i] = (x[i] - mean) / sqrt(var + eps) * w[i] + b[i]
// `out` may alias `x`.
void LayerNorm(std::span<const float> x, std::span<const float> w, std::span<const float> b,
               float eps, std::span<float> out);

// Group normalisation with `groups` equal contiguous groups (torch group_norm): each
// group normalised as LayerNorm above without the affine part, then
// out[i] = norm[i] * w[i] + b[i]. `out` may alias `x`.
// REQUIRES: x.size() % groups == 0.
void GroupNorm(std::span<const float> x, size_t groups, std::span<const float> w,
               std::span<const float> b, float eps, std::span<float> out);

// In place, per contiguous group of `group_size`: x /= max(||x||_2, 1e-12)
// (torch.nn.functional.normalize, p=2). The norm is sqrt of the in-order sum of
// squares. REQUIRES: x.size() % group_size == 0.
void L2NormalizeGroups(std::span<float> x, size_t group_size);

// 1 / (1 + exp(-x)).
float Sigmoid(float x);

// One token of the RWKV-7 WKV ("generalised delta rule") for ONE head of size N:
//
//   S <- S diag(w) + (S a) b^T + v k^T           a = -kk, b = kk * iclr
//   y  = S r                                      (with the updated S)
//
// S is [N][N] row-major, S[i][j]: i indexes value channels, j key channels. Order, for
// each row i: sa = Dot(S row i, kk);
//   S[i][j] = (S[i][j] * w[j] - sa * (kk[j] * iclr[j])) + v[i] * k[j];
//   y[i] = Dot(new S row i, r).
// (rwkv_v7_numpy.py: S = S * w.mT - S @ kk * (kk*a).mT + v * k.mT; y = S @ r.)
// REQUIRES: every vector has N = sqrt(S.size()) elements.
void Wkv7Head(std::span<float> S, std::span<const float> r, std::span<const float> w,
              std::span<const float> k, std::span<const float> v, std::span<const float> kk,
              std::span<const float> iclr, std::span<float> y);

}  // namespace kvstash::rwkv7
