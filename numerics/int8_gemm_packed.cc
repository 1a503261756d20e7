#include "numerics/int8_gemm_packed.h"

#include <algorithm>
#include <string>

#include "numerics/det_math.h"
#include "numerics/parallel_for.h"
#include "numerics/quantize_group.h"

namespace kvstash::spec {
namespace {

// Portable form of the blocked kernel for output-channel blocks [begin, end): per
// (row, channel) the exact int32 group sums and the reference fp32 order.
void GemmPackedScalar(const PackedActivations& a, const PackedWeights& b, float* out, int begin, int end) {
  const PackedShape& s = b.shape;
  const int np = b.blocks * kPackedBlock;
  for (int i = 0; i < a.m; ++i) {
    const int16_t* row = a.q.data() + static_cast<size_t>(i) * s.stride();
    for (int blk = begin; blk < end; ++blk) {
      const int8_t* panel = b.data.data() + static_cast<size_t>(blk) * s.pairs * 2 * kPackedBlock;
      for (int c = 0; c < kPackedBlock; ++c) {
        const int j = blk * kPackedBlock + c;
        if (j >= b.n) break;
        const int half = c / 8, lane = c % 8;
        float o = 0.0f;
        for (int g = 0; g < s.groups; ++g) {
          int32_t dot = 0;
          const int p0 = g * s.group_pairs;
          for (int p = p0; p < p0 + s.PairsOf(g); ++p) {
            const int8_t* w = panel + (static_cast<size_t>(p) * 2 + half) * 16 + lane * 2;
            dot += int32_t{row[2 * p]} * w[0] + int32_t{row[2 * p + 1]} * w[1];
          }
          const float sc = DMul(a.scales[static_cast<size_t>(i) * s.groups + g],
                                b.scales[static_cast<size_t>(g) * np + j]);
          o = DAdd(o, DMul(static_cast<float>(dot), sc));
        }
        out[static_cast<size_t>(i) * b.n + j] = o;
      }
    }
  }
}

}  // namespace

int PackedShape::PairsOf(int g) const {
  if (g + 1 < groups) return group_pairs;
  return (k - g * group + 1) / 2;
}

bool PackedShape::AmxShape() const { return group % 64 == 0 && (k - (groups - 1) * group) % 64 == 0; }

Status PackedShape::Make(int k, int group, PackedShape* out) {
  if (k < 1 || group < 1) {
    return Status::InvalidArgument("packed GEMM: need k >= 1 and group >= 1 (k=" + std::to_string(k) +
                                   ", group=" + std::to_string(group) + ")");
  }
  // A group wider than k is one group of k channels (as the reference quantiser does).
  group = std::min(group, k);
  out->k = k;
  out->group = group;
  out->groups = (k + group - 1) / group;
  out->group_pairs = (group + 1) / 2;
  out->pairs = (out->groups - 1) * out->group_pairs + (k - (out->groups - 1) * group + 1) / 2;
  return Status::Ok();
}

Status PackWeights(std::span<const int8_t> b, std::span<const float> b_scale, int n, int k, int group,
                   PackedWeights* out) {
  if (n < 0) return Status::InvalidArgument("packed GEMM: n must be >= 0");
  PackedShape s;
  KVSTASH_RETURN_IF_ERROR(PackedShape::Make(k, group == 0 ? k : group, &s));
  if (b.size() != static_cast<size_t>(n) * k || b_scale.size() != static_cast<size_t>(n) * s.groups) {
    return Status::InvalidArgument("packed GEMM: weights must be n*k and scales n*groups");
  }
  out->shape = s;
  out->n = n;
  out->blocks = (n + kPackedBlock - 1) / kPackedBlock;
  const int np = out->blocks * kPackedBlock;
  out->data.assign(static_cast<size_t>(out->blocks) * s.pairs * 2 * kPackedBlock, 0);
  out->scales.assign(static_cast<size_t>(s.groups) * np, 0.0f);
  for (int j = 0; j < n; ++j) {
    const int blk = j / kPackedBlock, half = (j % kPackedBlock) / 8, lane = j % 8;
    int8_t* panel = out->data.data() + static_cast<size_t>(blk) * s.pairs * 2 * kPackedBlock;
    for (int g = 0; g < s.groups; ++g) {
      const int k0 = g * s.group, len = std::min(s.group, k - k0);
      for (int t = 0; t < len; ++t) {
        const int p = g * s.group_pairs + t / 2;
        panel[(static_cast<size_t>(p) * 2 + half) * 16 + lane * 2 + t % 2] =
            b[static_cast<size_t>(j) * k + k0 + t];
      }
      out->scales[static_cast<size_t>(g) * np + j] = b_scale[static_cast<size_t>(j) * s.groups + g];
    }
  }
  out->amx.clear();
  if (s.AmxShape() && CpuHasAmx()) {
    // Groups have even lengths, so pair p holds input channels 2p, 2p+1 and quad q
    // (channels 4q..4q+3) is pairs 2q, 2q+1: per channel c, its 2 bytes of each.
    out->amx.resize(out->data.size());
    for (int blk = 0; blk < out->blocks; ++blk) {
      const int8_t* panel = out->data.data() + static_cast<size_t>(blk) * s.pairs * 2 * kPackedBlock;
      int8_t* dst = out->amx.data() + static_cast<size_t>(blk) * s.pairs * 2 * kPackedBlock;
      for (int q = 0; q < s.pairs / 2; ++q) {
        for (int c = 0; c < kPackedBlock; ++c) {
          for (int h = 0; h < 2; ++h) {
            const int8_t* src = panel + static_cast<size_t>(2 * q + h) * 32 + (c / 8) * 16 + (c % 8) * 2;
            dst[static_cast<size_t>(q) * 64 + c * 4 + 2 * h] = src[0];
            dst[static_cast<size_t>(q) * 64 + c * 4 + 2 * h + 1] = src[1];
          }
        }
      }
    }
  }
  return Status::Ok();
}

Status QuantizeActivations(std::span<const float> x, int m, const PackedShape& shape, int bits,
                           GemmBackend backend, int threads, PackedActivations* out) {
  if (m < 0 || x.size() != static_cast<size_t>(m) * shape.k) {
    return Status::InvalidArgument("quantise activations: x must be m*k values");
  }
  if (bits != 8 && bits != 16) return Status::InvalidArgument("quantise activations: bits must be 8 or 16");
  auto avx2 = UseAvx2(backend);
  if (!avx2.ok()) return avx2.status();
  auto amx = UseAmx(backend);
  if (!amx.ok()) return amx.status();
  out->shape = shape;
  out->m = m;
  out->bits = bits;
  const int stride = shape.stride();
  out->q.resize(static_cast<size_t>(m) * stride);
  out->scales.resize(static_cast<size_t>(m) * shape.groups);
  const float qmax = bits == 16 ? 32767.0f : 127.0f;
  // The AMX operands, split row by row below (padding rows stay 0).
  const bool split = *amx && shape.AmxShape();
  if (split) {
    internal::SizeForAmx(out);
  } else {
    out->amx_hi.clear();
    out->amx_lo.clear();
  }
  numerics::ParallelRanges(m, threads, [&, use = *avx2](int begin, int end) {
    int8_t q8[kMaxInt16Group];
    for (int i = begin; i < end; ++i) {
      int16_t* row = out->q.data() + static_cast<size_t>(i) * stride;
      for (int g = 0; g < shape.groups; ++g) {
        const int k0 = g * shape.group, len = std::min(shape.group, shape.k - k0);
        const float* src = x.data() + static_cast<size_t>(i) * shape.k + k0;
        int16_t* dst = row + 2 * g * shape.group_pairs;
        float scale = 0.0f;
#if defined(__x86_64__)
        const bool simd = use && internal::QuantizeGroupAvx2(src, len, qmax, dst, &scale);
#else
        const bool simd = false;  // use is false off x86-64 (CpuHasAvx2)
#endif
        if (!simd) {
          if (bits == 16) {
            scale = QuantizeGroup<int16_t>(src, static_cast<size_t>(len), qmax, dst);
          } else {
            // The int8 reference quantiser, then widened.
            std::vector<int8_t> big;
            int8_t* q = q8;
            if (len > kMaxInt16Group) {
              big.resize(len);
              q = big.data();
            }
            scale = QuantizeGroup<int8_t>(src, static_cast<size_t>(len), qmax, q);
            for (int t = 0; t < len; ++t) dst[t] = q[t];
          }
        }
        if (len % 2 != 0) dst[len] = 0;
        out->scales[static_cast<size_t>(i) * shape.groups + g] = scale;
      }
#if defined(__x86_64__)
      if (split) {
        const size_t at = static_cast<size_t>(i) * shape.k;
        internal::SplitRowForAmx(row, shape.k, out->amx_hi.data() + at, out->amx_lo.data() + at);
      }
#endif
    }
  });
  return Status::Ok();
}

namespace internal {

void SizeForAmx(PackedActivations* a) {
  // Rows [m, rows16) are zero; rows below m are all overwritten by the split.
  const size_t k = static_cast<size_t>(a->shape.k);
  const size_t m = static_cast<size_t>(a->m), rows16 = (m + 15) / 16 * 16;
  a->amx_hi.resize(rows16 * k);
  a->amx_lo.resize(rows16 * k);
  std::fill(a->amx_hi.begin() + m * k, a->amx_hi.end(), int8_t{0});
  std::fill(a->amx_lo.begin() + m * k, a->amx_lo.end(), int8_t{0});
}

void SplitForAmx(PackedActivations* a) {
  SizeForAmx(a);
#if defined(__x86_64__)
  const size_t k = static_cast<size_t>(a->shape.k);
  for (size_t i = 0; i < static_cast<size_t>(a->m); ++i) {
    SplitRowForAmx(a->q.data() + i * k, a->shape.k, a->amx_hi.data() + i * k, a->amx_lo.data() + i * k);
  }
#endif
}

}  // namespace internal

Status GemmPacked(const PackedActivations& a, const PackedWeights& b, std::span<float> out,
                  GemmBackend backend, int threads) {
  if (a.shape.k != b.shape.k || a.shape.group != b.shape.group) {
    return Status::InvalidArgument("packed GEMM: activations and weights have different k or group");
  }
  if (out.size() != static_cast<size_t>(a.m) * b.n ||
      a.q.size() != static_cast<size_t>(a.m) * a.shape.stride() ||
      a.scales.size() != static_cast<size_t>(a.m) * a.shape.groups) {
    return Status::InvalidArgument("packed GEMM: out must be m*n and activations m*stride");
  }
  if (a.bits == 16 ? a.shape.group > kMaxInt16Group : a.shape.k > (1 << 17)) {
    return Status::InvalidArgument("packed GEMM: group too large for exact int32 sums");
  }
  auto avx2 = UseAvx2(backend);
  if (!avx2.ok()) return avx2.status();
  auto avx512 = UseAvx512(backend);
  if (!avx512.ok()) return avx512.status();
  auto amx = UseAmx(backend);
  if (!amx.ok()) return amx.status();
  const size_t rows16 = (static_cast<size_t>(a.m) + 15) / 16 * 16;
  const bool tiles = *amx && b.amx.size() == b.data.size() && a.amx_hi.size() == rows16 * a.shape.k &&
                     a.amx_lo.size() == a.amx_hi.size();
  numerics::ParallelRanges(b.blocks, threads, [&, use = *avx2, use512 = *avx512](int begin, int end) {
#if defined(__x86_64__)
    if (tiles) {
      internal::GemmPackedAmx(a, b, out.data(), begin, end);
      return;
    }
    if (use512) {
      internal::GemmPackedAvx512(a, b, out.data(), begin, end);
      return;
    }
    if (use) {
      internal::GemmPackedAvx2(a, b, out.data(), begin, end);
      return;
    }
#else
    (void)use512;  // false off x86-64 (CpuHasAvx512), as tiles (CpuHasAmx)
    (void)tiles;
#endif
    GemmPackedScalar(a, b, out.data(), begin, end);
  });
  return Status::Ok();
}

}  // namespace kvstash::spec
