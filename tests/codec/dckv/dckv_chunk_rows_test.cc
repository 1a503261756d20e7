// dckv::AppendChunkRows: an engine's cached KV (K after RoPE, bf16/f16/f32) turned into
// calibration rows (K before RoPE, V, fp32). Checks: the K rows are exactly the
// codec's inverse RoPE (RotateHead, inverse) of the widened cached values, bit for bit;
// against the true pre-RoPE K they are within the derived bounds (fp32 rotation
// rounding for f32; plus the cache's rounding, 2^-11 (f16) or 2^-8 (bf16) of a pair's
// norm, which the orthogonal rotation carries unchanged); V is the widened value
// exactly; skip, absolute positions and appending; bad input is refused and appends
// nothing.
#include "codec/dckv/dckv_chunk_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "codec/dckv/dckv_rope.h"
#include "kvstash/dtype.h"

namespace kvstash::dckv {
namespace {

constexpr uint32_t kLayers = 2, kHeads = 3, kHeadDim = 8, kTokens = 11;
constexpr float kTheta = 10000.0f;

// True pre-RoPE K and V of every layer, [kTokens, kHeads, kHeadDim] fp32, and the chunk
// an engine would cache: K rotated at position first + t, both rounded to `dtype`.
struct Case {
  std::vector<std::vector<float>> k_pre, v;
  KvChunk chunk;
};

void Store(float x, DType dt, uint8_t* out, uint64_t i) {
  if (dt == DType::kF32) {
    std::memcpy(out + 4 * i, &x, 4);
  } else {
    const uint16_t h = dt == DType::kF16 ? F32ToF16(x) : F32ToBf16(x);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

float Widen(const uint8_t* p, DType dt, uint64_t i) {
  if (dt == DType::kF32) {
    float x;
    std::memcpy(&x, p + 4 * i, 4);
    return x;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return dt == DType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
}

Case MakeCase(DType dt, uint32_t first, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 3.0f);
  Case c;
  c.chunk = KvChunk::Zeros(KvLayout{kLayers, kHeads, kHeadDim, dt}, kTokens);
  const uint64_t hr = kHeads * kHeadDim;
  for (uint32_t l = 0; l < kLayers; ++l) {
    c.k_pre.emplace_back(kTokens * hr);
    c.v.emplace_back(kTokens * hr);
    for (auto& x : c.k_pre[l]) x = n(rng);
    for (auto& x : c.v[l]) x = n(rng);
    for (uint32_t t = 0; t < kTokens; ++t) {
      std::vector<float> row(c.k_pre[l].begin() + t * hr, c.k_pre[l].begin() + (t + 1) * hr);
      for (uint32_t h = 0; h < kHeads; ++h)
        RotateHead(row.data() + h * kHeadDim, kHeadDim, first + t, kTheta, false);
      for (uint64_t j = 0; j < hr; ++j) {
        Store(row[j], dt, c.chunk.MutableK(l).data(), t * hr + j);
        Store(c.v[l][t * hr + j], dt, c.chunk.MutableV(l).data(), t * hr + j);
      }
    }
  }
  return c;
}

// Per dtype: the rows are the inverse RoPE of the cached values bit for bit, V the
// cached values, and K within the derived distance of the true pre-RoPE K.
TEST(DckvChunkRows, UndoesRopeOfEveryDtypeWithinItsRounding) {
  // Relative rounding of the cache dtype (half an ulp: 2^-(mantissa bits + 1)).
  const struct {
    DType dt;
    double cache_rel;
  } kCases[] = {{DType::kF32, 0.0}, {DType::kF16, std::ldexp(1.0, -11)}, {DType::kBF16, std::ldexp(1.0, -8)}};
  for (const auto& tc : kCases) {
    SCOPED_TRACE(DTypeName(tc.dt));
    const uint32_t first = 1000, skip = 2;
    const Case c = MakeCase(tc.dt, first, 5);
    auto rows = DckvRows::ForShape(kLayers, kHeads, kHeadDim);
    ASSERT_TRUE(AppendChunkRows(c.chunk.view(), first, skip, kTheta, &rows).ok());
    const uint32_t n = kTokens - skip;
    const uint64_t hr = kHeads * kHeadDim;
    EXPECT_EQ(rows.rows, n);
    for (uint32_t l = 0; l < kLayers; ++l) {
      ASSERT_EQ(rows.k[l].size(), n * hr);
      ASSERT_EQ(rows.v[l].size(), n * hr);
      for (uint32_t r = 0; r < n; ++r) {
        const uint32_t t = skip + r;
        std::vector<float> want(hr);
        for (uint64_t j = 0; j < hr; ++j) {
          want[j] = Widen(c.chunk.view().K(l).data(), tc.dt, t * hr + j);
          EXPECT_EQ(rows.v[l][r * hr + j], Widen(c.chunk.view().V(l).data(), tc.dt, t * hr + j));
        }
        for (uint32_t h = 0; h < kHeads; ++h)
          RotateHead(want.data() + h * kHeadDim, kHeadDim, first + t, kTheta, true);
        EXPECT_EQ(0, std::memcmp(want.data(), rows.k[l].data() + r * hr, hr * sizeof(float)))
            << "layer " << l << " t " << t;
        // Against the true pre-RoPE K, per pair (i, i + d/2) of each head: the cache
        // rounds each value by at most cache_rel of itself, so the rotated pair by at
        // most cache_rel x its norm, which the inverse rotation keeps; two fp32
        // rotations with cos/sin rounded to fp32 add at most ~8 u (|a| + |b|) per
        // value, u = 2^-24, bounded here by 16 u x sqrt(2) x the norm per pair.
        for (uint32_t h = 0; h < kHeads; ++h) {
          for (uint32_t i = 0; i < kHeadDim / 2; ++i) {
            const uint64_t a = t * hr + h * kHeadDim + i, b = a + kHeadDim / 2;
            const double ta = c.k_pre[l][a], tb = c.k_pre[l][b];
            const double ga = rows.k[l][r * hr + h * kHeadDim + i];
            const double gb = rows.k[l][r * hr + h * kHeadDim + i + kHeadDim / 2];
            const double norm = std::hypot(ta, tb);
            const double err = std::hypot(ga - ta, gb - tb);
            const double bound = tc.cache_rel * norm * (1 + 1e-3) +
                                 16 * std::ldexp(1.0, -24) * std::sqrt(2.0) * norm +
                                 std::ldexp(1.0, -24);  // f16 subnormals: absolute 2^-25 per value
            EXPECT_LE(err, bound) << "layer " << l << " t " << t << " head " << h << " pair " << i;
          }
        }
      }
    }
  }
}

// Appending: two chunks of one document at their own absolute positions give the rows
// of the whole; skip >= tokens appends nothing.
TEST(DckvChunkRows, AppendsAtAbsolutePositions) {
  const Case c = MakeCase(DType::kF32, 0, 9);
  auto whole = DckvRows::ForShape(kLayers, kHeads, kHeadDim);
  ASSERT_TRUE(AppendChunkRows(c.chunk.view(), 0, 0, kTheta, &whole).ok());
  // The same KV as two chunks: tokens [0, 4) at position 0 and [4, 11) at position 4.
  auto parts = DckvRows::ForShape(kLayers, kHeads, kHeadDim);
  const uint64_t hr = kHeads * kHeadDim;
  for (auto [b, e] : {std::pair<uint32_t, uint32_t>{0, 4}, {4, kTokens}}) {
    KvChunk piece = KvChunk::Zeros(c.chunk.layout, e - b);
    for (uint32_t l = 0; l < kLayers; ++l) {
      std::memcpy(piece.MutableK(l).data(), c.chunk.view().K(l).data() + b * hr * 4, (e - b) * hr * 4);
      std::memcpy(piece.MutableV(l).data(), c.chunk.view().V(l).data() + b * hr * 4, (e - b) * hr * 4);
    }
    ASSERT_TRUE(AppendChunkRows(piece.view(), b, 0, kTheta, &parts).ok());
  }
  EXPECT_EQ(parts.rows, kTokens);
  EXPECT_EQ(parts.k, whole.k);
  EXPECT_EQ(parts.v, whole.v);
  ASSERT_TRUE(AppendChunkRows(c.chunk.view(), 0, kTokens, kTheta, &parts).ok());
  EXPECT_EQ(parts.rows, kTokens);
  EXPECT_EQ(parts.k[0].size(), kTokens * hr);
}

TEST(DckvChunkRows, RefusesBadInputAndAppendsNothing) {
  const Case c = MakeCase(DType::kF16, 0, 3);
  auto rows = DckvRows::ForShape(kLayers, kHeads, kHeadDim);
  // Another shape.
  auto other = DckvRows::ForShape(kLayers, kHeads + 1, kHeadDim);
  EXPECT_EQ(AppendChunkRows(c.chunk.view(), 0, 0, kTheta, &other).IsInvalidArgument(), true);
  EXPECT_EQ(other.rows, 0u);
  // theta <= 0, no rows.
  EXPECT_EQ(AppendChunkRows(c.chunk.view(), 0, 0, 0.0f, &rows).IsInvalidArgument(), true);
  EXPECT_EQ(AppendChunkRows(c.chunk.view(), 0, 0, kTheta, nullptr).IsInvalidArgument(), true);
  // fp8 is not a cache dtype the rows read.
  KvChunk fp8 = KvChunk::Zeros(KvLayout{kLayers, kHeads, kHeadDim, DType::kFP8E4M3}, 2);
  EXPECT_EQ(AppendChunkRows(fp8.view(), 0, 0, kTheta, &rows).IsInvalidArgument(), true);
  // A view whose data does not match its layout.
  KvChunkView bad = c.chunk.view();
  bad.data = bad.data.first(bad.data.size() - 2);
  EXPECT_EQ(AppendChunkRows(bad, 0, 0, kTheta, &rows).IsInvalidArgument(), true);
  EXPECT_EQ(rows.rows, 0u);
  for (uint32_t l = 0; l < kLayers; ++l) EXPECT_TRUE(rows.k[l].empty() && rows.v[l].empty());
}

}  // namespace
}  // namespace kvstash::dckv
