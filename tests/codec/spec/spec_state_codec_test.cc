// Spec state coding (codec/spec/spec_state_codec.h): the token split and fp32 ordinal
// maps, the context rule, artifact round trip, and the codec's lossless round trip of
// every bit pattern, Mismatch on another prediction or artifact, and Corruption (never
// a wrong state) on damaged bodies. Synthetic states with a fixed seed: these tests
// check exactness and error paths; figures come from `kvstash-bench codec --state`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "codec/spec/spec_state_artifact.h"
#include "codec/spec/spec_state_codec.h"
#include "codec/spec/spec_state_symbols.h"
#include "kvstash/dtype_bits.h"
#include "tests/support/test_util.h"

namespace kvstash::spec {
namespace {

StateTensor Tensor(const std::string& name, std::vector<uint64_t> shape, const std::vector<float>& v) {
  StateTensor t;
  t.name = name;
  t.dtype = DType::kF32;
  t.shape = std::move(shape);
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

std::vector<float> Floats(const StateTensor& t) {
  std::vector<float> v(t.data.size() / 4);
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

// An "exact" state of two tensors (a [3, r, r] matrix state and an [r] vector) and a
// prediction off by a relative error of about `rel`.
std::pair<RecurrentState, RecurrentState> Pair(uint32_t seed, uint64_t r, double rel) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  RecurrentState exact, pred;
  exact.boundary_tokens = pred.boundary_tokens = 256;
  std::vector<float> m(3 * r * r), mp(m.size()), s(r), sp(r);
  for (size_t i = 0; i < m.size(); ++i) {
    m[i] = g(rng) * 0.3f * static_cast<float>(1 + i / (r * r));
    mp[i] = m[i] + static_cast<float>(rel) * g(rng) * 0.3f;
  }
  for (size_t i = 0; i < r; ++i) {
    s[i] = g(rng);
    sp[i] = s[i] + static_cast<float>(rel) * g(rng);
  }
  exact.tensors = {Tensor("layers.0.wkv_state", {3, r, r}, m), Tensor("layers.0.att_shift", {r}, s)};
  pred.tensors = {Tensor("layers.0.wkv_state", {3, r, r}, mp), Tensor("layers.0.att_shift", {r}, sp)};
  return {exact, pred};
}

SpecStateArtifact Calibrated() {
  std::vector<std::pair<RecurrentState, RecurrentState>> states;
  for (uint32_t s = 0; s < 4; ++s) states.push_back(Pair(100 + s, 16, 1e-3));
  std::vector<StateCalibrationPair> pairs;
  for (auto& [e, p] : states) pairs.push_back({&e, &p});
  auto a = CalibrateSpecState(pairs);
  EXPECT_OK(a);
  return std::move(a).value();
}

TEST(SpecStateSymbols, OrdinalIsAnOrderPreservingBijection) {
  const uint32_t probes[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x7F7FFFFFu, 0xFF7FFFFFu,
                             0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFFFFFFFu, 0x3F800000u, 0xBF800000u};
  for (uint32_t b : probes) EXPECT_EQ(FromOrdinal32(Ordinal32(b)), b) << std::hex << b;
  EXPECT_EQ(Ordinal32(0x80000000u) + 1, Ordinal32(0x00000000u));  // -0 just below +0
  EXPECT_EQ(Ordinal32(0x00000000u) + 1, Ordinal32(0x00000001u));  // +0 then min subnormal
  EXPECT_LT(Ordinal32(Bits(-2.0f)), Ordinal32(Bits(-1.0f)));
  EXPECT_LT(Ordinal32(Bits(1.0f)), Ordinal32(Bits(1.0000001f)));
  EXPECT_EQ(Ordinal32(Bits(1.0000001f)) - Ordinal32(Bits(1.0f)), 1u);
}

TEST(SpecStateSymbols, TokenSplitRoundTripsEveryMagnitudeClass) {
  std::vector<uint32_t> rs = {0, 1,           2,           3,           4,           5,          7,
                              8, 0x80000000u, 0x7FFFFFFFu, 0x80000001u, 0xFFFFFFFFu, 0xFFFFFFFCu};
  for (int k = 2; k < 32; ++k) {
    for (uint32_t d : {0u, 1u}) {
      rs.push_back((1u << k) - d);
      rs.push_back(0u - ((1u << k) - d));
      rs.push_back((1u << k) + d + (1u << (k - 1)));
    }
  }
  for (uint32_t r : rs) {
    const StateToken t = TokenOfResidual(r);
    ASSERT_EQ(RawCountOfSymbol(t.symbol), t.raw_count) << std::hex << r;
    EXPECT_LT(t.raw, t.raw_count == 0 ? 1u : (1u << t.raw_count));
    EXPECT_EQ(ResidualOfToken(t.symbol, t.raw), r) << std::hex << r;
  }
  // Hand-derived: 13 = 0b1101 -> k = 3, next two bits 10 -> M = 4 + 4 + 2 = 10, raw 1 bit = 1.
  const StateToken t13 = TokenOfResidual(13);
  EXPECT_EQ(t13.symbol, 10);
  EXPECT_EQ(t13.raw_count, 1);
  EXPECT_EQ(t13.raw, 1u);
  EXPECT_EQ(TokenOfResidual(0u - 13u).symbol, 0x80 | 10);
  EXPECT_EQ(TokenOfResidual(0x80000000u).symbol, 120);  // 2^31: k = 31, positive
  EXPECT_EQ(RawCountOfSymbol(0x80), -1);                // negative zero
  EXPECT_EQ(RawCountOfSymbol(124), -1);
}

TEST(SpecStateSymbols, ContextRule) {
  const int32_t one = Log2Quarter(Bits(1.0f));  // 4 * 127
  EXPECT_EQ(one, 508);
  // pred = 1.0 in a row and column of scale 1.0: s4 = offset + 92 -> table (offset + 92) / 2.
  EXPECT_EQ(StateTableOf(Bits(1.0f), one, 0), 46);
  EXPECT_EQ(StateTableOf(Bits(1.0f), one, -40), 26);
  // scale 4x the prediction: 2 octaves more spread in ulps of pred = +8 quarter octaves.
  EXPECT_EQ(StateTableOf(Bits(0.25f), one, -40), 30);
  EXPECT_EQ(StateTableOf(Bits(1.0f), one, -200), 0);   // clamped low
  EXPECT_EQ(StateTableOf(Bits(1.0f), one, 200), 63);   // clamped high
  EXPECT_EQ(StateTableOf(Bits(-1.0f), one, -41), 25);  // floor of 51 / 2
  EXPECT_EQ(StateTableOf(0u, one, 0), kStateZeroTable);
  EXPECT_EQ(StateTableOf(0x80000001u, one, 0), kStateZeroTable);
  EXPECT_EQ(StateTableOf(0x7FC00000u, one, 0), kStateNonFiniteTable);
  EXPECT_EQ(StateTableOf(0xFF800000u, 0, 0), kStateNonFiniteTable);
  const uint32_t row[] = {Bits(-3.0f), 0x7F800000u, 0x7FC00000u, Bits(2.0f)};
  EXPECT_EQ(MaxAbsBits(row, 4, 1), Bits(3.0f));  // Inf and NaN never win
  EXPECT_EQ(MaxAbsBits(row, 2, 3), Bits(3.0f));  // strided: elements 0 and 3
}

TEST(SpecStateSymbols, ScaleIsTheMeanOfRowAndColumnLogScales) {
  // One 2 x 2 matrix [[1, 0.25], [4, 0.5]], twice (rank 3): row maxima 1, 4
  // (L4 508, 516), column maxima 4, 0.5 (516, 504).
  const uint32_t m[] = {Bits(1.0f), Bits(0.25f), Bits(4.0f), Bits(0.5f),
                        Bits(1.0f), Bits(0.25f), Bits(4.0f), Bits(0.5f)};
  const uint64_t shape[] = {2, 2, 2};
  int32_t s[8];
  ScaleQuarterOctaves(m, 8, shape, 3, s);
  const int32_t want[] = {512, 506, 516, 510, 512, 506, 516, 510};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s[i], want[i]) << i;
  // Rank 1: one row and one column; 3.0 = 1.5 * 2^1 -> L4 = 4 * 128 + 2.
  const uint32_t v[] = {Bits(1.0f), Bits(-3.0f), 0x7FC00000u};
  const uint64_t vs[] = {3};
  int32_t sv[3];
  ScaleQuarterOctaves(v, 3, vs, 1, sv);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sv[i], 514) << i;
}

TEST(SpecStateArtifact, SerializeParseRoundTripAndCorruption) {
  const SpecStateArtifact a = Calibrated();
  EXPECT_EQ(a.offsets4().size(), 2u);
  const std::vector<uint8_t> bytes = a.Serialize();
  ASSERT_OK_AND_ASSIGN(SpecStateArtifact b, SpecStateArtifact::Parse(bytes));
  EXPECT_EQ(b.digest(), a.digest());
  EXPECT_EQ(b.Serialize(), bytes);
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0x20;
    EXPECT_FALSE(SpecStateArtifact::Parse(bad).ok()) << i;
  }
  for (size_t n : {size_t{0}, size_t{3}, size_t{16}, bytes.size() - 1}) {
    EXPECT_STATUS(SpecStateArtifact::Parse(std::span<const uint8_t>(bytes).first(n)), kCorruption);
  }
}

TEST(SpecStateCodec, RoundTripsAcrossSizes) {
  const SpecStateArtifact a = Calibrated();
  for (uint64_t r : {1u, 2u, 7u, 8u, 9u, 16u, 33u}) {
    auto [exact, pred] = Pair(7 + static_cast<uint32_t>(r), r, 1e-3);
    StateCodingStats st;
    ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, EncodeSpecState(a, exact, pred, &st));
    EXPECT_EQ(st.scalars, 3 * r * r + r);
    EXPECT_EQ(st.body_bytes, body.size());
    ASSERT_OK_AND_ASSIGN(RecurrentState back, DecodeSpecState(a, body, pred));
    EXPECT_EQ(back, exact) << r;
  }
}

TEST(SpecStateCodec, EmptyAndSingleScalarStates) {
  const SpecStateArtifact a = Calibrated();
  RecurrentState empty;
  empty.boundary_tokens = 3;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, EncodeSpecState(a, empty, empty));
  EXPECT_GE(body.size(), 52u);  // the header, then an empty rANS stream
  ASSERT_OK_AND_ASSIGN(RecurrentState back, DecodeSpecState(a, body, empty));
  EXPECT_EQ(back, empty);
  RecurrentState one, one_pred;
  one.tensors = {Tensor("x", {1}, {-0.0f})};
  one_pred.tensors = {Tensor("x", {1}, {0.0f})};
  ASSERT_OK_AND_ASSIGN(body, EncodeSpecState(a, one, one_pred));
  ASSERT_OK_AND_ASSIGN(back, DecodeSpecState(a, body, one_pred));
  EXPECT_EQ(back, one);
  EXPECT_EQ(Bits(Floats(back.tensors[0])[0]), 0x80000000u);
  one_pred.boundary_tokens = 1;
  EXPECT_STATUS(EncodeSpecState(a, one, one_pred), kInvalidArgument);  // other boundary
}

TEST(SpecStateCodec, CloseThenFarPredictionsCostMore) {
  const SpecStateArtifact a = Calibrated();
  auto [e1, p1] = Pair(5, 16, 1e-4);
  auto [e2, p2] = Pair(5, 16, 1e-1);
  ASSERT_OK_AND_ASSIGN(auto close, EncodeSpecState(a, e1, p1));
  ASSERT_OK_AND_ASSIGN(auto far, EncodeSpecState(a, e2, p2));
  EXPECT_LT(close.size(), far.size());
  EXPECT_LT(close.size(), 4 * (3 * 16 * 16 + 16) * 3 / 4);  // well under raw fp32
}

TEST(SpecStateCodec, EveryBitPatternRoundTrips) {
  const SpecStateArtifact a = Calibrated();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<uint32_t> specials = {0x00000000u, 0x80000000u, 0x00000001u,  0x807FFFFFu,
                                          0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u,  0xFF800000u,
                                          0x7FC00000u, 0xFFC00001u, 0x7F800001u,  0xFFFFFFFFu,
                                          Bits(1.0f),  Bits(-1.0f), Bits(1e-30f), Bits(-3.5e37f)};
  // Every special against every special: exact value x, prediction y.
  std::vector<float> ex, pr;
  for (uint32_t x : specials) {
    for (uint32_t y : specials) {
      ex.push_back(FromBits(x));
      pr.push_back(FromBits(y));
    }
  }
  ex.push_back(inf);
  pr.push_back(-inf);
  RecurrentState exact, pred;
  exact.tensors = {Tensor("layers.0.att_shift", {ex.size()}, ex)};
  pred.tensors = {Tensor("layers.0.att_shift", {pr.size()}, pr)};
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, EncodeSpecState(a, exact, pred));
  ASSERT_OK_AND_ASSIGN(RecurrentState back, DecodeSpecState(a, body, pred));
  EXPECT_EQ(back.tensors[0].data, exact.tensors[0].data);  // bytes: NaN payloads, -0 kept
  // An unknown tensor name uses the default offset and still round-trips.
  exact.tensors[0].name = pred.tensors[0].name = "conv_state";
  ASSERT_OK_AND_ASSIGN(body, EncodeSpecState(a, exact, pred));
  ASSERT_OK_AND_ASSIGN(back, DecodeSpecState(a, body, pred));
  EXPECT_EQ(back, exact);
}

TEST(SpecStateCodec, AnotherPredictionOrArtifactIsMismatch) {
  const SpecStateArtifact a = Calibrated();
  auto [exact, pred] = Pair(11, 16, 1e-3);
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, EncodeSpecState(a, exact, pred));
  RecurrentState other = pred;
  other.tensors[0].data[17] ^= 0x01;  // one bit of one predicted scalar
  EXPECT_STATUS(DecodeSpecState(a, body, other), kMismatch);
  std::vector<std::pair<RecurrentState, RecurrentState>> states = {Pair(1, 16, 1e-2)};
  const StateCalibrationPair p{&states[0].first, &states[0].second};
  ASSERT_OK_AND_ASSIGN(SpecStateArtifact b, CalibrateSpecState(std::span(&p, 1)));
  ASSERT_NE(a.digest(), b.digest());
  EXPECT_STATUS(DecodeSpecState(b, body, pred), kMismatch);
}

TEST(SpecStateCodec, DamagedBodiesNeverGiveAWrongState) {
  const SpecStateArtifact a = Calibrated();
  auto [exact, pred] = Pair(12, 8, 1e-3);
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> body, EncodeSpecState(a, exact, pred));
  for (size_t i = 0; i < body.size(); ++i) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}}) {
      std::vector<uint8_t> bad = body;
      bad[i] ^= flip;
      auto r = DecodeSpecState(a, bad, pred);
      if (r.ok()) {
        EXPECT_EQ(*r, exact) << "byte " << i;  // only a harmless flip may decode
      } else {
        EXPECT_TRUE(r.status().code() == Status::Code::kCorruption ||
                    r.status().code() == Status::Code::kMismatch)
            << i << " " << r.status().ToString();
      }
    }
  }
  for (size_t n = 0; n < body.size(); ++n) {
    EXPECT_FALSE(DecodeSpecState(a, std::span<const uint8_t>(body).first(n), pred).ok()) << n;
  }
  std::vector<uint8_t> longer = body;
  longer.push_back(0);
  EXPECT_STATUS(DecodeSpecState(a, longer, pred), kCorruption);
}

TEST(SpecStateCodec, ShapeMismatchIsInvalidArgument) {
  const SpecStateArtifact a = Calibrated();
  auto [exact, pred] = Pair(3, 8, 1e-3);
  RecurrentState renamed = pred;
  renamed.tensors[1].name = "layers.0.ffn_shift";
  EXPECT_STATUS(EncodeSpecState(a, exact, renamed), kInvalidArgument);
  RecurrentState fewer = pred;
  fewer.tensors.pop_back();
  EXPECT_STATUS(EncodeSpecState(a, exact, fewer), kInvalidArgument);
  RecurrentState bf = exact;
  bf.tensors[1].dtype = DType::kBF16;
  bf.tensors[1].data.resize(16);
  RecurrentState bfp = pred;
  bfp.tensors[1].dtype = DType::kBF16;
  bfp.tensors[1].data.resize(16);
  EXPECT_STATUS(EncodeSpecState(a, bf, bfp), kInvalidArgument);
  EXPECT_STATUS(CalibrateSpecState({}), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::spec
