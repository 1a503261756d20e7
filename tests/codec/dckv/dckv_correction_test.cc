// The optional correction nets (dckv_correction.h, artifact version 4): artifacts
// without a net decode exactly as before (digest and content checksums pinned from
// the code before the nets existed, commit d3ad084); the tiled decoder net equals the
// defining loop bit for bit; a hand-built net decodes to an independent
// double-precision evaluation within bf16 rounding; a zero last layer decodes exactly
// as no net; encode/decode round trip with both nets; parse/serialize round trip and
// refusal of malformed nets.
#include "codec/dckv/dckv_correction.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "codec/dckv/dckv_rope.h"
#include "common/byte_io.h"
#include "common/checksum.h"
#include "kvstash/prefix_key.h"
#include "tests/codec/dckv/dckv_hand_artifact.h"
#include "tests/support/test_util.h"

namespace kvstash::dckv {
namespace {

constexpr Digest256 kModel = {7, 7};

// Without a net the artifact is written as version 3, byte for byte as before, and
// decodes to the same chunks: values from the code before this change.
TEST(DckvCorrection, NoNetKeepsBytesAndChecksums) {
  const DckvArtifact a = testing::HandArtifact();
  const auto bytes = a.Serialize();
  EXPECT_EQ(LoadLe<uint16_t>(bytes.data() + 4), 3);
  EXPECT_EQ(ToHex(a.Digest()), "11d9fe2b94b1573b3b3866617ec87db0689de958241be0080570f159131601c3");
  ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(a));
  const std::pair<uint32_t, uint64_t> want[] = {
      {1, 0x1a0b52326c9b2d46ull}, {7, 0x97134c82029dd17bull}, {40, 0xbbd312e099eebb16ull}};
  for (const auto& [tokens, checksum] : want) {
    ASSERT_OK_AND_ASSIGN(auto chunk, codec.Reconstruct(testing::HandQuantized(a, tokens), 5));
    EXPECT_EQ(chunk.ContentChecksum(), checksum) << tokens;
  }
}

// Tiled decoder net (every synthesis path) == the defining loop, bit for bit, over
// sizes around the tile (6 rows) and panel (16 columns), with zero coefficients.
TEST(DckvCorrection, TiledNetEqualsReferenceBitForBit) {
  std::vector<SynthesisPath> paths = {SynthesisPath::kPortable};
  if (SynthesisHasAvx2()) paths.push_back(SynthesisPath::kAvx2);
  if (SynthesisHasAvx512()) paths.push_back(SynthesisPath::kAvx512);
  uint32_t seed = 1;
  for (uint32_t rows : {0u, 1u, 6u, 7u, 13u}) {
    for (uint32_t n_active : {1u, 5u, 17u}) {
      for (uint32_t hidden : {1u, 16u, 33u}) {
        for (uint32_t dims : {1u, 16u, 40u}) {
          const DckvNet net = testing::RandomNet(hidden, n_active, dims, 0.3f, seed++);
          std::mt19937 rng(seed);
          std::normal_distribution<float> n01(0.0f, 2.0f);
          std::vector<float> coef(static_cast<size_t>(rows) * n_active), x0(static_cast<size_t>(rows) * dims);
          for (float& c : coef) c = n01(rng);
          for (size_t i = 0; i < coef.size(); i += 3) coef[i] = 0.0f;
          for (float& v : x0) v = n01(rng);
          std::vector<float> want = x0;
          ApplyDecoderCorrectionReference(net, n_active, dims, coef, rows, want);
          const PackedDecoderNet packed = PackDecoderNet(net, n_active, dims);
          for (SynthesisPath path : paths) {
            std::vector<float> got = x0;
            ApplyDecoderCorrection(packed, net, coef, rows, got, path);
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
                  << rows << " " << n_active << " " << hidden << " " << dims << " at " << i;
            }
          }
        }
      }
    }
  }
}

// A hand-built decoder net (hidden 3, weights in multiples of 1/16) on the hand
// artifact: every decoded value equals mean + sum c_i basis_i + W2 GELU(W1 c + b1) + b2,
// RoPE'd for K, evaluated in double (GELU's tanh form in double), within bf16
// rounding (half an ulp) plus a small fp32 slack.
TEST(DckvCorrection, HandNetMatchesDoubleEvaluation) {
  DckvArtifact a = testing::HandArtifact();
  const uint32_t H = 3;
  for (auto& g : a.groups) {
    DckvNet& n = g.decoder_net;
    n.hidden = H;
    for (uint32_t k = 0; k < H; ++k) {
      for (uint32_t i = 0; i < g.n_active(); ++i)
        n.w1.push_back(static_cast<float>((int(k * 5 + i) % 7) - 3) / 16.0f);
      n.b1.push_back(static_cast<float>(k) / 4.0f - 0.25f);
    }
    for (uint32_t j = 0; j < g.dims; ++j) {
      for (uint32_t k = 0; k < H; ++k) n.w2.push_back(static_cast<float>((int(j * 3 + k) % 9) - 4) / 16.0f);
      n.b2.push_back(static_cast<float>(int(j % 5) - 2) / 32.0f);
    }
  }
  ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(a));
  const uint32_t T = 9, offset = 5;
  const DckvQuantized q = testing::HandQuantized(a, T);
  ASSERT_OK_AND_ASSIGN(auto chunk, codec.Reconstruct(q, offset));
  const uint32_t hr = a.HeadRow(), hd = a.head_dim;
  auto gelu = [](double v) {
    return v / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  uint64_t sym = 0, checked = 0;
  double worst = 0;
  for (uint32_t t = 0; t < T; ++t) {
    for (const auto& g : a.groups) {
      std::vector<double> c(g.n_active());
      for (uint32_t i = 0; i < g.n_active(); ++i, ++sym)
        c[i] = static_cast<int16_t>(q.symbols[sym]) * double(g.step[i]);
      std::vector<double> x(g.dims), mag(g.dims);
      std::vector<double> h(H);
      for (uint32_t k = 0; k < H; ++k) {
        double s = g.decoder_net.b1[k];
        for (uint32_t i = 0; i < g.n_active(); ++i) s += g.decoder_net.w1[k * g.n_active() + i] * c[i];
        h[k] = gelu(s);
      }
      for (uint32_t j = 0; j < g.dims; ++j) {
        x[j] = g.mean[j] + g.decoder_net.b2[j];
        mag[j] = std::abs(g.mean[j]) + std::abs(g.decoder_net.b2[j]);
        for (uint32_t i = 0; i < g.n_active(); ++i) {
          x[j] += c[i] * g.basis[i * g.dims + j];
          mag[j] += std::abs(c[i] * g.basis[i * g.dims + j]);
        }
        for (uint32_t k = 0; k < H; ++k) {
          x[j] += h[k] * g.decoder_net.w2[j * H + k];
          mag[j] += std::abs(h[k] * g.decoder_net.w2[j * H + k]);
        }
      }
      for (uint32_t l = 0; l < g.layers; ++l) {
        double* k = x.data() + 2 * l * hr;
        for (uint32_t head = 0; head < a.n_kv_heads; ++head) {  // RoPE, rotate_half layout, in double
          double* kh = k + head * hd;
          for (uint32_t i = 0; i < hd / 2; ++i) {
            const double ang = double(offset + t) * std::pow(double(a.rope_theta), -2.0 * i / hd);
            const double x0 = kh[i], x1 = kh[i + hd / 2];
            kh[i] = x0 * std::cos(ang) - x1 * std::sin(ang);
            kh[i + hd / 2] = x1 * std::cos(ang) + x0 * std::sin(ang);
          }
        }
        for (int kv = 0; kv < 2; ++kv) {
          const auto bytes = kv == 0 ? chunk.view().K(g.first_layer + l) : chunk.view().V(g.first_layer + l);
          for (uint32_t e = 0; e < hr; ++e) {
            const uint16_t b = LoadLe<uint16_t>(bytes.data() + 2 * (static_cast<uint64_t>(t) * hr + e));
            const double got = std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
            const double want = x[2 * l * hr + kv * hr + e];
            const double m =
                kv == 0 ? 2 * mag[2 * l * hr + e] : mag[2 * l * hr + hr + e];  // RoPE mixes two values
            const double err = std::abs(got - want);
            EXPECT_LE(err, std::ldexp(std::abs(want), -8) + 1e-5 * m + 1e-30) << t << " " << e;
            worst = std::max(worst, err / std::abs(want));
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, static_cast<uint64_t>(T) * a.n_layers * 2 * hr);
  std::printf("[ info ] worst relative error %.3g (bf16 half ulp <= 2^-8 = 0.0039)\n", worst);
  // The net changes the output: without it the values differ.
  DckvArtifact plain = testing::HandArtifact();
  ASSERT_OK_AND_ASSIGN(auto plain_codec, DckvCodec::Create(plain));
  ASSERT_OK_AND_ASSIGN(auto plain_chunk, plain_codec.Reconstruct(q, offset));
  EXPECT_NE(plain_chunk.data, chunk.data);
}

// W2 = 0 and b2 = +-0 (first layer arbitrary): exactly the output without a net, on
// the hand artifact (pinned checksums) and on a calibrated one through Encode/Decode.
TEST(DckvCorrection, ZeroLastLayerDecodesAsNoNet) {
  for (float b2 : {0.0f, -0.0f}) {
    DckvArtifact a = testing::HandArtifact();
    for (auto& g : a.groups) {
      g.decoder_net = testing::RandomNet(7, g.n_active(), g.dims, 0.0f, 3);
      for (float& v : g.decoder_net.w2) v = 0.0f;
      for (float& v : g.decoder_net.b2) v = b2;
    }
    EXPECT_NE(ToHex(a.Digest()), "11d9fe2b94b1573b3b3866617ec87db0689de958241be0080570f159131601c3");
    ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(a));
    ASSERT_OK_AND_ASSIGN(auto chunk, codec.Reconstruct(testing::HandQuantized(a, 40), 5));
    EXPECT_EQ(chunk.ContentChecksum(), 0xbbd312e099eebb16ull);
  }
}

// Encode/Decode with both nets: the payload decodes (content checksum verified), the
// symbols round trip, Decode equals the encoder's reconstruction, the decoder net
// changes the output, and the encoder net enters the symbols as defined (checked in
// double). The nets are random (untrained): no quality claim. Zero last layers give the linear codec's bytes.
TEST(DckvCorrection, EncodeDecodeRoundTripWithNets) {
  ASSERT_OK_AND_ASSIGN(const DckvArtifact plain, testing::PlainArtifact(6.0, 2));
  DckvArtifact a = plain, zero = plain;
  for (size_t gi = 0; gi < a.groups.size(); ++gi) {
    auto& g = a.groups[gi];
    g.decoder_net = testing::RandomNet(16, g.n_active(), g.dims, 2e-5f, 10 + gi);
    g.encoder_net = testing::RandomNet(12, g.dims, g.n_active(), 2e-4f, 20 + gi);
    zero.groups[gi].decoder_net = testing::RandomNet(16, g.n_active(), g.dims, 0.0f, 30 + gi);
  }
  ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(a));
  ASSERT_OK_AND_ASSIGN(auto plain_codec, DckvCodec::Create(plain));
  ASSERT_OK_AND_ASSIGN(auto zero_codec, DckvCodec::Create(zero));
  const auto eval = testing::MakeRows(200, 1);
  for (uint32_t tokens : {1u, 7u, 33u, 100u}) {
    const uint32_t offset = 9;
    const auto chunk = testing::MakeChunk(eval, offset, offset + tokens, DType::kF32);
    ASSERT_OK_AND_ASSIGN(auto q, codec.Quantize(chunk.view(), offset, 200));
    ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), offset, 200, kModel));
    uint32_t got_offset = 0;
    ASSERT_OK_AND_ASSIGN(auto back, codec.ParsePayload(payload, kModel, &got_offset));
    EXPECT_EQ(back.symbols, q.symbols);
    ASSERT_OK_AND_ASSIGN(auto decoded, codec.Decode(payload, kModel));
    ASSERT_OK_AND_ASSIGN(auto rec, codec.Reconstruct(q, offset));
    EXPECT_EQ(decoded.data, rec.data);
    // Another artifact (the linear one) refuses the payload.
    EXPECT_STATUS(plain_codec.Decode(payload, kModel), kMismatch);
    ASSERT_OK_AND_ASSIGN(auto plain_payload, plain_codec.Encode(chunk.view(), offset, 200, kModel));
    ASSERT_OK_AND_ASSIGN(auto plain_decoded, plain_codec.Decode(plain_payload, kModel));
    if (tokens > 5) {  // some coded rows
      EXPECT_NE(decoded.data, plain_decoded.data) << tokens;
    }
    // The encoder net is applied as defined: each even coded row's symbol (its centre
    // is the token map's bias row: this artifact has no token conditioning) is
    // round((y - mu) / step) with y = <basis_i, u> + g_e(u)_i evaluated in double
    // (ties and near-ties, where fp32 and double may round apart, skipped).
    ASSERT_EQ(a.conditioning.rank, 0u);
    uint64_t group_offset = 0, compared = 0;
    for (const auto& g : a.groups) {
      for (uint32_t r = 0; r < tokens; r += 2) {
        std::vector<double> u(g.dims);
        for (uint32_t j = 0; j < g.layers; ++j) {
          const uint32_t l = g.first_layer + j, hr = a.HeadRow();
          std::vector<float> k(hr), v(hr);
          std::memcpy(k.data(), chunk.view().K(l).data() + 4ull * r * hr, 4ull * hr);
          std::memcpy(v.data(), chunk.view().V(l).data() + 4ull * r * hr, 4ull * hr);
          for (uint32_t h = 0; h < a.n_kv_heads; ++h)
            RotateHead(k.data() + h * a.head_dim, a.head_dim, offset + r, a.rope_theta, true);
          for (uint32_t c = 0; c < hr; ++c) {
            u[2 * j * hr + c] = double(k[c]) - g.mean[2 * j * hr + c];
            u[2 * j * hr + hr + c] = double(v[c]) - g.mean[2 * j * hr + hr + c];
          }
        }
        for (uint32_t c = 0; c < g.dims; ++c) u[c] *= g.encode_scale.empty() ? 1.0 : g.encode_scale[c];
        const DckvNet& e = g.encoder_net;
        std::vector<double> hid(e.hidden);
        for (uint32_t k = 0; k < e.hidden; ++k) {
          double s = e.b1[k];
          for (uint32_t c = 0; c < g.dims; ++c) s += double(e.w1[k * g.dims + c]) * u[c];
          hid[k] = s / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (s + 0.044715 * s * s * s)));
        }
        for (uint32_t i = 0; i < g.n_active(); ++i) {
          double y = e.b2[i];
          for (uint32_t c = 0; c < g.dims; ++c) y += double(g.basis[i * g.dims + c]) * u[c];
          for (uint32_t k = 0; k < e.hidden; ++k) y += double(e.w2[i * e.hidden + k]) * hid[k];
          const double t = (y - g.token_map[i]) / g.step[i];
          if (std::abs(std::abs(t - std::floor(t)) - 0.5) < 1e-3) continue;
          EXPECT_EQ(static_cast<int16_t>(q.symbols[r * a.ActiveComponents() + group_offset + i]),
                    std::lround(t))
              << tokens << " row " << r << " component " << i;
          ++compared;
        }
      }
      group_offset += g.n_active();
    }
    EXPECT_GT(compared, 0u);
    ASSERT_OK_AND_ASSIGN(auto pq0, plain_codec.Quantize(chunk.view(), offset, 200));
    if (tokens > 5) {
      EXPECT_NE(q.symbols, pq0.symbols);  // the encoder net moves some symbols
    }
    // Zero last layer: same symbols and values as the linear codec (payloads differ
    // only by the artifact digest).
    ASSERT_OK_AND_ASSIGN(auto zq, zero_codec.Quantize(chunk.view(), offset, 200));
    ASSERT_OK_AND_ASSIGN(auto pq, plain_codec.Quantize(chunk.view(), offset, 200));
    EXPECT_EQ(zq.symbols, pq.symbols);
    ASSERT_OK_AND_ASSIGN(auto zero_payload, zero_codec.Encode(chunk.view(), offset, 200, kModel));
    ASSERT_OK_AND_ASSIGN(auto zero_decoded, zero_codec.Decode(zero_payload, kModel));
    EXPECT_EQ(zero_decoded.data, plain_decoded.data);
  }
}

std::vector<uint8_t> Reseal(std::vector<uint8_t> bytes) {
  bytes.resize(bytes.size() - 8);
  ByteWriter(&bytes).U64(Xxh3_64(bytes));
  return bytes;
}

TEST(DckvCorrection, SerializeParseRoundTrip) {
  DckvArtifact a = testing::HandArtifact();
  a.groups[0].decoder_net = testing::RandomNet(5, a.groups[0].n_active(), a.groups[0].dims, 0.1f, 1);
  a.groups[1].encoder_net = testing::RandomNet(4, a.groups[1].dims, a.groups[1].n_active(), 0.1f, 2);
  EXPECT_TRUE(a.HasCorrection());
  EXPECT_TRUE(a.HasDecoderCorrection());
  const auto bytes = a.Serialize();
  EXPECT_EQ(LoadLe<uint16_t>(bytes.data() + 4), kArtifactVersionCorrection);
  ASSERT_OK_AND_ASSIGN(auto b, DckvArtifact::Parse(bytes));
  EXPECT_EQ(b.Serialize(), bytes);
  EXPECT_EQ(b.Digest(), a.Digest());
  EXPECT_EQ(b.groups[0].decoder_net.w2, a.groups[0].decoder_net.w2);
  EXPECT_EQ(b.groups[0].decoder_net.b1, a.groups[0].decoder_net.b1);
  EXPECT_TRUE(b.groups[0].encoder_net.empty());
  EXPECT_TRUE(b.groups[1].decoder_net.empty());
  EXPECT_EQ(b.groups[1].encoder_net.w1, a.groups[1].encoder_net.w1);
  EXPECT_EQ(b.groups[1].encoder_net.b2, a.groups[1].encoder_net.b2);
  // Only an encoder net: version 4, decoder output unchanged.
  DckvArtifact enc = testing::HandArtifact();
  enc.groups[0].encoder_net = testing::RandomNet(3, enc.groups[0].dims, 5, 0.1f, 4);
  EXPECT_TRUE(enc.HasCorrection());
  EXPECT_FALSE(enc.HasDecoderCorrection());
  ASSERT_OK_AND_ASSIGN(auto enc_back, DckvArtifact::Parse(enc.Serialize()));
  EXPECT_EQ(enc_back.groups[0].encoder_net.hidden, 3u);
  ASSERT_OK_AND_ASSIGN(auto enc_codec, DckvCodec::Create(enc));
  ASSERT_OK_AND_ASSIGN(auto chunk, enc_codec.Reconstruct(testing::HandQuantized(enc, 40), 5));
  EXPECT_EQ(chunk.ContentChecksum(), 0xbbd312e099eebb16ull);
  // Version 3 bytes still parse.
  const auto v3 = testing::HandArtifact().Serialize();
  ASSERT_OK_AND_ASSIGN(auto c, DckvArtifact::Parse(v3));
  EXPECT_FALSE(c.HasCorrection());
}

TEST(DckvCorrection, MalformedNetsAreRefused) {
  const DckvArtifact good = [] {
    DckvArtifact a = testing::HandArtifact();
    a.groups[0].decoder_net = testing::RandomNet(5, a.groups[0].n_active(), a.groups[0].dims, 0.1f, 1);
    return a;
  }();
  const auto bytes = good.Serialize();
  // Truncations and flipped bits anywhere: Corruption.
  for (size_t n : {bytes.size() / 3, bytes.size() / 2, bytes.size() - 9}) {
    EXPECT_STATUS(DckvArtifact::Parse(Reseal(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n + 8))),
                  kCorruption)
        << n;
  }
  // Field-level errors, each through Serialize (which writes what it is given) + Parse,
  // and through Create.
  auto refused = [](const DckvArtifact& a, const char* what) {
    EXPECT_STATUS(DckvArtifact::Parse(a.Serialize()), kCorruption) << what;
    EXPECT_STATUS(DckvCodec::Create(a), kInvalidArgument) << what;
  };
  {
    DckvArtifact a = good;
    a.groups[0].decoder_net.w2[3] = std::nanf("");
    refused(a, "NaN weight");
    a.groups[0].decoder_net.w2[3] = std::numeric_limits<float>::infinity();
    refused(a, "inf weight");
    a.groups[0].decoder_net.w2[3] = 5e9f;
    refused(a, "weight above 2^32");
  }
  {
    DckvArtifact a = good;
    a.groups[0].mean[2] = -0.0f;
    refused(a, "-0.0 in the mean of a group with a decoder net");
    a.groups[0].decoder_net = DckvNet{};
    a.groups[0].encoder_net = testing::RandomNet(2, a.groups[0].dims, 5, 0.1f, 9);
    ASSERT_OK(DckvArtifact::Parse(a.Serialize()).status());  // fine without a decoder net
  }
  {
    DckvArtifact a = good;
    a.groups[0].decoder_net =
        testing::RandomNet(kMaxCorrectionHidden + 1, a.groups[0].n_active(), a.groups[0].dims, 0.1f, 1);
    refused(a, "too many hidden units");
  }
  {
    DckvArtifact a = good;  // shapes that disagree with the group (Create only: Parse reads by shape)
    a.groups[0].decoder_net.b2.pop_back();
    EXPECT_STATUS(DckvCodec::Create(a), kInvalidArgument);
    a = good;
    a.groups[1].encoder_net.w1 = {1.0f};
    EXPECT_STATUS(DckvCodec::Create(a), kInvalidArgument);
  }
  // Version 4 without any net: Corruption (Serialize writes such an artifact as v3).
  // Built from a v4 artifact whose only net (hidden 1, group 0's decoder, the last
  // thing of group 0) is replaced by "hidden 0".
  {
    DckvArtifact a = testing::HandArtifact();
    const DckvGroup& g = a.groups[0];
    a.groups[0].decoder_net = testing::RandomNet(1, g.n_active(), g.dims, 0.1f, 1);
    const auto with = a.Serialize();
    ASSERT_OK(DckvArtifact::Parse(with).status());
    // Offset of group 0's decoder net: header (52 bytes up to and with n_groups, rank 0
    // so no embeddings), then group 0's fields.
    const size_t net_at = 52 + 16 + 4 * g.dims + 4 + 4 * 5 * g.dims + 4 * 5 + 2 * 5 + 2 * 5 + 4 * 5 + 4;
    const size_t net_bytes = 4 + 4 * (5 + 1 + g.dims + g.dims);
    ASSERT_EQ(LoadLe<uint32_t>(with.data() + net_at), 1u);
    std::vector<uint8_t> zeroed(with.begin(), with.begin() + net_at);
    ByteWriter(&zeroed).U32(0);
    zeroed.insert(zeroed.end(), with.begin() + net_at + net_bytes, with.end());
    EXPECT_STATUS(DckvArtifact::Parse(Reseal(zeroed)), kCorruption);
  }
  // Version 5 (the encoder basis) reads one more field per group: these bytes are
  // truncated as version 5. An unknown later version: Mismatch.
  auto v5 = bytes;
  v5[4] = 5;
  EXPECT_STATUS(DckvArtifact::Parse(Reseal(v5)), kCorruption);
  auto v6 = bytes;
  v6[4] = 6;
  EXPECT_STATUS(DckvArtifact::Parse(Reseal(v6)), kMismatch);
}

}  // namespace
}  // namespace kvstash::dckv
