// Import of a trained codec (dckv_trained.h) and the closed-form refit
// (dckv_calibration.h RefitDckvArtifact) on the synthetic rows of dckv_test_data.h:
//   (a) identity: a trained file holding a closed-form artifact's own transform
//       (W_e = W_d = basis, the encode scale folded into W_e for a weighted basis, same
//       mean and steps, no nets) refits to that artifact's conditional models and
//       tables on the same rows (equal bytes without conditioning; with it, equal
//       table indices and tables and maps within a stated tolerance, the coefficients
//       being computed by another fp32 product); the imported codec round-trips chunks;
//   (b) a separate W_e with both nets: a version 5 artifact, Parse(Serialize) the
//       identity, Encode/Decode round trip, and every decoded value equal, bit for bit,
//       to mean + sum_i c_i W_d[i] + g_d(c) (SynthesizeRowsReference,
//       ApplyDecoderCorrectionReference), RoPE'd and rounded to bf16;
//   (c) bad files: wrong SHA-256, wrong shapes, a missing net tensor, NaN, unexpected
//       tensors, a bad format tag -> clear errors.
#include "codec/dckv/dckv_trained.h"

#include <gtest/gtest.h>

#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "codec/dckv/dckv_calibration.h"
#include "codec/dckv/dckv_codec.h"
#include "codec/dckv/dckv_correction.h"
#include "codec/dckv/dckv_rope.h"
#include "codec/dckv/dckv_synthesis.h"
#include "common/byte_io.h"
#include "common/checksum.h"
#include "kvstash/dtype.h"
#include "kvstash/prefix_key.h"
#include "kvstash/sha256.h"
#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/codec/dckv/dckv_trained_file.h"
#include "tests/codec/dckv/safetensors_writer.h"
#include "tests/support/test_util.h"

namespace kvstash::dckv {
namespace {

using testing::AddNet;
using testing::Metadata;
using testing::Tensors;
using testing::TransformTensors;

constexpr Digest256 kModel = {9, 1};

Result<DckvArtifact> Import(const Tensors& t, const std::vector<uint8_t>& base, const DckvRows& rows,
                            const DckvRefitOptions& o = {}) {
  const auto file = testing::SafetensorsBytes(t, Metadata(base));
  KVSTASH_ASSIGN_OR_RETURN(auto tr, TrainedDckvTransform(file, base));
  return RefitDckvArtifact(std::move(tr.transform), rows, o);
}

// Largest |a - b| / (max |b| of the vector), 0 for equal vectors.
double RelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 0, worst = 0;
  for (float v : b) scale = std::max(scale, std::abs(double(v)));
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return scale > 0 ? worst / scale : worst;
}

// Encode/Decode of chunks of stream 1: the payload decodes to the encoder's own
// reconstruction. Returns the RMS error of the decoded values.
double RoundTripRms(const DckvArtifact& a, const DckvRows& eval) {
  auto codec = DckvCodec::Create(a);
  EXPECT_TRUE(codec.ok()) << codec.status().ToString();
  double se = 0;
  uint64_t n = 0;
  for (uint32_t tokens : {1u, 8u, 60u}) {
    const uint32_t offset = 10;
    const auto chunk = testing::MakeChunk(eval, offset, offset + tokens, DType::kF32);
    std::vector<uint32_t> ids;
    if (a.conditioning.rank > 0)
      ids.assign(eval.tokens.begin() + offset, eval.tokens.begin() + offset + tokens);
    auto payload = codec->Encode(chunk.view(), ids, offset, 200, kModel);
    EXPECT_TRUE(payload.ok()) << payload.status().ToString();
    auto decoded = codec->Decode(*payload, kModel);
    EXPECT_TRUE(decoded.ok()) << decoded.status().ToString();
    auto q = codec->Quantize(chunk.view(), ids, offset, 200);
    auto rec = codec->Reconstruct(*q, offset);
    EXPECT_EQ(decoded->data, rec->data);
    const auto got = testing::ChunkValues(*decoded), want = testing::ChunkValues(chunk);
    for (size_t i = 0; i < got.size(); ++i) {
      se += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
      ++n;
    }
  }
  return std::sqrt(se / n);
}

// (a) Plain PCA, no conditioning: the refit gives the closed-form artifact byte for
// byte (version 3: W_e equals W_d, so no encoder basis is stored).
TEST(DckvTrained, IdentityImportPlainIsByteEqual) {
  const auto rows = testing::MakeRows(800, 0);
  ASSERT_OK_AND_ASSIGN(const DckvArtifact a, testing::PlainArtifact(6.0, 2));  // fitted on `rows`
  const auto base = a.Serialize();
  DckvRefitReport report;
  const auto file = testing::SafetensorsBytes(TransformTensors(a), Metadata(base));
  ASSERT_OK_AND_ASSIGN(auto tr, TrainedDckvTransform(file, base));
  EXPECT_EQ(tr.metadata.at("lambda"), "0.1");
  ASSERT_OK_AND_ASSIGN(const DckvArtifact b, RefitDckvArtifact(tr.transform, rows, {}, &report));
  EXPECT_FALSE(b.HasEncoderBasis());
  EXPECT_EQ(b.Serialize(), base);
  EXPECT_EQ(report.context, (std::vector<bool>{false, false}));
  EXPECT_GT(report.estimated_bits, 0.0);
  const auto eval = testing::MakeRows(200, 1);
  EXPECT_EQ(RoundTripRms(b, eval), RoundTripRms(a, eval));
}

// (a) Token-conditioned with the checkerboard model, and weighted PCA (encode scale
// folded into W_e: a version 5 artifact). Steps, means and bases are copied exactly;
// table indices, context inputs and tables are equal; the token and context maps
// agree within 1e-5 of each map's largest entry (measured: <= 1e-7): the refit's coefficients
// (u W_e^T over the active components) and calibration's (x_c W over all components)
// are fp32 products in another order, so their last bits differ, and the ridge fits
// amplify that by their conditioning.
TEST(DckvTrained, IdentityImportConditionedAndWeightedMatchCalibration) {
  struct Case {
    const char* name;
    DckvRows rows;
    DckvFitOptions fo;
  };
  DckvFitOptions conditioned;
  conditioned.embed_rank = testing::kEmbedDim;
  DckvFitOptions weighted;
  weighted.output_weight.assign(2 * testing::kLayers * testing::kHeads, 1.0);
  weighted.output_weight[0] = 100.0;
  for (const Case& c : {Case{"conditioned", testing::MakeConditionedRows(1200, 0), conditioned},
                        Case{"weighted", testing::MakeRows(800, 0), weighted}}) {
    SCOPED_TRACE(c.name);
    ASSERT_OK_AND_ASSIGN(auto basis, FitDckvBasis(c.rows, 2, c.fo));
    DckvRateOptions o;
    o.target_ratio = 6.0;
    o.raw_head = 2;
    o.raw_tail = 3;
    ASSERT_OK_AND_ASSIGN(const DckvArtifact a, MakeDckvArtifact(basis, o));
    const auto base = a.Serialize();
    ASSERT_OK_AND_ASSIGN(const DckvArtifact b, Import(TransformTensors(a), base, c.rows));
    const bool is_weighted = !c.fo.output_weight.empty();
    EXPECT_EQ(b.HasEncoderBasis(), is_weighted);
    EXPECT_EQ(LoadLe<uint16_t>(b.Serialize().data() + 4), is_weighted ? 5 : 3);
    ASSERT_EQ(b.groups.size(), a.groups.size());
    EXPECT_EQ(b.conditioning.embed_bf16, a.conditioning.embed_bf16);
    bool any_context = false;
    for (size_t gi = 0; gi < a.groups.size(); ++gi) {
      const DckvGroup &ga = a.groups[gi], &gb = b.groups[gi];
      EXPECT_EQ(gb.mean, ga.mean);
      EXPECT_EQ(gb.basis, ga.basis);
      EXPECT_EQ(gb.step, ga.step);
      EXPECT_TRUE(gb.encode_scale.empty());
      EXPECT_EQ(gb.table_index, ga.table_index) << gi;
      EXPECT_EQ(gb.odd_table_index, ga.odd_table_index) << gi;
      EXPECT_EQ(gb.context_inputs, ga.context_inputs) << gi;
      any_context |= ga.context_inputs > 0;
      ASSERT_EQ(gb.token_map.size(), ga.token_map.size());
      ASSERT_EQ(gb.context_map.size(), ga.context_map.size());
      const double dt = RelDiff(gb.token_map, ga.token_map), dc = RelDiff(gb.context_map, ga.context_map);
      EXPECT_LE(dt, 1e-5) << gi;
      EXPECT_LE(dc, 1e-5) << gi;
      std::printf("[ info ] %s group %zu: token map %.2g, context map %.2g (relative)\n", c.name, gi, dt, dc);
    }
    EXPECT_EQ(any_context, !is_weighted);
    EXPECT_EQ(b.tables->Serialize(), a.tables->Serialize());
    ASSERT_OK_AND_ASSIGN(auto parsed, DckvArtifact::Parse(b.Serialize()));
    EXPECT_EQ(parsed.Serialize(), b.Serialize());
    // The imported codec round-trips and is as accurate as the closed-form one (the
    // same quantiser; a coefficient's last bit may move a rounding).
    const auto eval = is_weighted ? testing::MakeRows(200, 1) : testing::MakeConditionedRows(200, 1);
    const double rb = RoundTripRms(b, eval), ra = RoundTripRms(a, eval);
    EXPECT_NEAR(rb, ra, 1e-3 * ra);
    std::printf("[ info ] %s: RMS error imported %.6g, closed form %.6g\n", c.name, rb, ra);
  }
}

// (b) Separate W_e (a perturbed basis) and both nets, without conditioning: version 5,
// Parse(Serialize) identity, Encode/Decode round trip, the decoded values exactly the
// reference evaluation of the decoder with W_d, and the symbols those of W_e.
TEST(DckvTrained, SeparateEncoderAndNetsDecodeAsDefined) {
  const auto rows = testing::MakeRows(800, 0);
  ASSERT_OK_AND_ASSIGN(const DckvArtifact a, testing::PlainArtifact(6.0, 2));  // fitted on `rows`
  const auto base = a.Serialize();
  Tensors t = TransformTensors(a);
  std::mt19937 rng(5);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  for (size_t gi = 0; gi < a.groups.size(); ++gi) {
    const auto& g = a.groups[gi];
    const std::string p = "group." + std::to_string(gi) + ".";
    for (float& v : t[p + "encoder"].values) v += 0.02f * n01(rng);
    AddNet(&t, p + "decoder_net", 16, g.n_active(), g.dims, 0.01f, 10 + gi);
    AddNet(&t, p + "encoder_net", 8, g.dims, g.n_active(), 0.01f, 20 + gi);
  }
  DckvRefitReport report;
  const auto file = testing::SafetensorsBytes(t, Metadata(base));
  ASSERT_OK_AND_ASSIGN(auto tr, TrainedDckvTransform(file, base));
  ASSERT_OK_AND_ASSIGN(const DckvArtifact b, RefitDckvArtifact(tr.transform, rows, {}, &report));
  const auto bytes = b.Serialize();
  EXPECT_EQ(LoadLe<uint16_t>(bytes.data() + 4), kArtifactVersionEncoderBasis);
  ASSERT_OK_AND_ASSIGN(auto parsed, DckvArtifact::Parse(bytes));
  EXPECT_EQ(parsed.Serialize(), bytes);
  for (size_t gi = 0; gi < b.groups.size(); ++gi) {
    EXPECT_EQ(parsed.groups[gi].encoder_basis, t["group." + std::to_string(gi) + ".encoder"].values);
    EXPECT_EQ(parsed.groups[gi].basis, a.groups[gi].basis);
    EXPECT_EQ(parsed.groups[gi].decoder_net.hidden, 16u);
    EXPECT_EQ(parsed.groups[gi].encoder_net.hidden, 8u);
  }
  ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(parsed));
  ASSERT_EQ(parsed.conditioning.rank, 0u);  // c_i = s_i step_i (bias row 0, no context map)
  const auto eval = testing::MakeRows(200, 1);
  const uint32_t offset = 9, tokens = 40, hr = parsed.HeadRow();
  const auto chunk = testing::MakeChunk(eval, offset, offset + tokens, DType::kF32);
  ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), offset, 200, kModel));
  ASSERT_OK_AND_ASSIGN(auto decoded, codec.Decode(payload, kModel));
  ASSERT_OK_AND_ASSIGN(auto q, codec.Quantize(chunk.view(), offset, 200));
  ASSERT_EQ(q.raw_head_rows + q.raw_tail_rows, 0u);
  uint64_t group_offset = 0, checked = 0;
  for (const auto& g : parsed.groups) {
    for (float v : g.token_map) EXPECT_EQ(v, 0.0f);
    const uint32_t na = g.n_active();
    std::vector<float> coef(static_cast<size_t>(tokens) * na), x(static_cast<size_t>(tokens) * g.dims);
    for (uint32_t r = 0; r < tokens; ++r)
      for (uint32_t i = 0; i < na; ++i)
        coef[r * na + i] = static_cast<float>(static_cast<int16_t>(
                               q.symbols[r * parsed.ActiveComponents() + group_offset + i])) *
                           g.step[i];
    SynthesizeRowsReference(g.basis, na, g.dims, g.mean, coef, tokens, x);
    ApplyDecoderCorrectionReference(g.decoder_net, na, g.dims, coef, tokens, x);
    for (uint32_t r = 0; r < tokens; ++r) {
      for (uint32_t j = 0; j < g.layers; ++j) {
        float* xk = x.data() + static_cast<size_t>(r) * g.dims + 2ull * j * hr;
        for (uint32_t h = 0; h < parsed.n_kv_heads; ++h)
          RotateHead(xk + h * parsed.head_dim, parsed.head_dim, offset + r, parsed.rope_theta, false);
        for (int kv = 0; kv < 2; ++kv) {
          const auto out =
              kv == 0 ? decoded.view().K(g.first_layer + j) : decoded.view().V(g.first_layer + j);
          for (uint32_t e = 0; e < hr; ++e) {
            const uint16_t got = LoadLe<uint16_t>(out.data() + 2 * (static_cast<uint64_t>(r) * hr + e));
            ASSERT_EQ(got, F32ToBf16(xk[kv * hr + e])) << "row " << r << " layer " << g.first_layer + j;
            ++checked;
          }
        }
      }
    }
    group_offset += na;
  }
  EXPECT_EQ(checked, static_cast<uint64_t>(tokens) * parsed.n_layers * 2 * hr);
  // The encoder uses W_e and g_e: the symbols differ from the closed-form codec's.
  ASSERT_OK_AND_ASSIGN(auto plain, DckvCodec::Create(a));
  ASSERT_OK_AND_ASSIGN(auto pq, plain.Quantize(chunk.view(), offset, 200));
  EXPECT_NE(pq.symbols, q.symbols);
  // The same file with the conditioned-free round trip through the helper.
  EXPECT_GT(RoundTripRms(parsed, eval), 0.0);
}

// (c) Bad files: each refused with a clear error naming the problem.
TEST(DckvTrained, BadFilesAreRefused) {
  ASSERT_OK_AND_ASSIGN(const DckvArtifact a, testing::PlainArtifact(6.0, 2));
  const auto base = a.Serialize();
  const Tensors good = TransformTensors(a);
  auto expect = [&](const Tensors& t, const std::map<std::string, std::string>& meta, Status::Code code,
                    const std::string& part) {
    auto r = TrainedDckvTransform(testing::SafetensorsBytes(t, meta), base);
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().ToString();
  };
  ASSERT_OK(TrainedDckvTransform(testing::SafetensorsBytes(good, Metadata(base)), base).status());
  // Wrong SHA-256 (another base artifact).
  auto meta = Metadata(base);
  meta["base_artifact_sha256"] = std::string(64, '0');
  expect(good, meta, Status::Code::kMismatch, "SHA-256");
  auto other = base;
  other[20] ^= 1;
  EXPECT_STATUS(TrainedDckvTransform(testing::SafetensorsBytes(good, Metadata(base)), other), kMismatch);
  // Upper-case hex is the same digest.
  meta = Metadata(base);
  for (char& ch : meta["base_artifact_sha256"]) ch = static_cast<char>(std::toupper(ch));
  EXPECT_OK(TrainedDckvTransform(testing::SafetensorsBytes(good, meta), base).status());
  // Format tag.
  meta = Metadata(base);
  meta["format"] = "kvstash-dckv-trained/2";
  expect(good, meta, Status::Code::kInvalidArgument, "format");
  // Wrong shapes.
  Tensors t = good;
  t["group.0.mean"].shape = {t["group.0.mean"].values.size() - 1};
  t["group.0.mean"].values.pop_back();
  expect(t, Metadata(base), Status::Code::kInvalidArgument, "tensor 'group.0.mean' has shape");
  t = good;
  t["group.1.step"].values.push_back(1.0f);
  t["group.1.step"].shape[0] += 1;
  expect(t, Metadata(base), Status::Code::kInvalidArgument, "tensor 'group.1.step' has shape");
  t = good;
  t["group.0.encoder"].shape = {t["group.0.encoder"].values.size()};
  expect(t, Metadata(base), Status::Code::kInvalidArgument, "tensor 'group.0.encoder' has shape");
  // Steps <= 0.
  t = good;
  t["group.0.step"].values[1] = 0.0f;
  expect(t, Metadata(base), Status::Code::kInvalidArgument, "'group.0.step' has a value <= 0 at index 1");
  // Missing tensors: one of a net's four, the decoder, a whole group.
  t = good;
  AddNet(&t, "group.1.decoder_net", 4, a.groups[1].n_active(), a.groups[1].dims, 0.01f, 1);
  ASSERT_OK(TrainedDckvTransform(testing::SafetensorsBytes(t, Metadata(base)), base).status());
  t.erase("group.1.decoder_net.b2");
  expect(t, Metadata(base), Status::Code::kInvalidArgument, "lacks tensor 'group.1.decoder_net.b2'");
  t = good;
  AddNet(&t, "group.0.encoder_net", 4, a.groups[0].dims, a.groups[0].n_active(), 0.01f, 1);
  t["group.0.encoder_net.w2"].shape = {4, a.groups[0].n_active()};
  expect(t, Metadata(base), Status::Code::kInvalidArgument, "tensor 'group.0.encoder_net.w2' has shape");
  t = good;
  t.erase("group.0.decoder");
  expect(t, Metadata(base), Status::Code::kInvalidArgument, "missing tensor 'group.0.decoder'");
  t = good;
  t.erase("group.1.encoder");
  expect(t, Metadata(base), Status::Code::kInvalidArgument, "missing tensor 'group.1.encoder'");
  // Unexpected tensors (a group the base does not have).
  t = good;
  t["group.2.mean"] = {{4}, {0, 0, 0, 0}};
  expect(t, Metadata(base), Status::Code::kInvalidArgument, "unexpected tensor 'group.2.mean'");
  // NaN anywhere: the safetensors reader refuses it, naming the tensor.
  t = good;
  t["group.1.decoder"].values[3] = std::numeric_limits<float>::quiet_NaN();
  expect(t, Metadata(base), Status::Code::kCorruption,
         "tensor 'group.1.decoder': non-finite value at index 3");
  // A net weight above the artifact's limit.
  t = good;
  AddNet(&t, "group.0.decoder_net", 2, a.groups[0].n_active(), a.groups[0].dims, 0.01f, 1);
  t["group.0.decoder_net.w1"].values[0] = 1e10f;
  expect(t, Metadata(base), Status::Code::kInvalidArgument, "group 0");
  // A malformed base artifact.
  auto broken = base;
  broken.resize(broken.size() - 1);
  meta = Metadata(broken);
  EXPECT_STATUS(TrainedDckvTransform(testing::SafetensorsBytes(good, meta), broken), kCorruption);
  // A trained file that is not safetensors.
  EXPECT_STATUS(TrainedDckvTransform(std::vector<uint8_t>{1, 2, 3}, base), kCorruption);
  // Refit: rows of another shape, and token ids missing for a conditioned transform.
  ASSERT_OK_AND_ASSIGN(auto tr, TrainedDckvTransform(testing::SafetensorsBytes(good, Metadata(base)), base));
  auto rows = testing::MakeRows(100, 0);
  rows.head_dim = 4;
  EXPECT_STATUS(RefitDckvArtifact(tr.transform, rows, {}), kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(const DckvArtifact c, testing::ConditionedArtifact(6.0, true));
  const auto cbase = c.Serialize();
  ASSERT_OK_AND_ASSIGN(
      auto ctr, TrainedDckvTransform(testing::SafetensorsBytes(TransformTensors(c), Metadata(cbase)), cbase));
  EXPECT_STATUS(RefitDckvArtifact(ctr.transform, testing::MakeRows(100, 0), {}), kInvalidArgument);
}

// Version 5 rules: no encoder basis in a version 5 artifact, or an encoder basis beside
// an encode scale, is Corruption; truncations are Corruption.
TEST(DckvTrained, Version5ParseRules) {
  ASSERT_OK_AND_ASSIGN(DckvArtifact a, testing::PlainArtifact(6.0, 2));
  a.groups[1].encoder_basis = a.groups[1].basis;
  a.groups[1].encoder_basis[0] += 0.5f;
  const auto bytes = a.Serialize();
  ASSERT_EQ(LoadLe<uint16_t>(bytes.data() + 4), 5);
  ASSERT_OK_AND_ASSIGN(auto parsed, DckvArtifact::Parse(bytes));
  EXPECT_EQ(parsed.Serialize(), bytes);
  EXPECT_TRUE(parsed.groups[0].encoder_basis.empty());
  auto reseal = [](std::vector<uint8_t> b) {
    b.resize(b.size() - 8);
    ByteWriter(&b).U64(Xxh3_64(b));
    return b;
  };
  // Group 1's flag -> 0 and its basis removed: a version 5 artifact without one.
  const DckvGroup& g1 = a.groups[1];
  const size_t basis_bytes = 4ull * g1.n_active() * g1.dims;
  const size_t table_section = 4 + a.tables->Serialize().size() + 8;
  const size_t flag_at = bytes.size() - table_section - basis_bytes - 4;
  ASSERT_EQ(LoadLe<uint32_t>(bytes.data() + flag_at), 1u);
  std::vector<uint8_t> none(bytes.begin(), bytes.begin() + flag_at);
  ByteWriter(&none).U32(0);
  none.insert(none.end(), bytes.end() - table_section, bytes.end());
  EXPECT_STATUS(DckvArtifact::Parse(reseal(none)), kCorruption);
  // Without the version 5 bump the same artifact (no encoder basis) is version 3.
  DckvArtifact plain = a;
  plain.groups[1].encoder_basis.clear();
  EXPECT_EQ(LoadLe<uint16_t>(plain.Serialize().data() + 4), 3);
  // A flag of 2.
  auto two = bytes;
  two[flag_at] = 2;
  EXPECT_STATUS(DckvArtifact::Parse(reseal(two)), kCorruption);
  // Truncations.
  for (size_t cut : {size_t{1}, size_t{9}, basis_bytes / 2}) {
    std::vector<uint8_t> b(bytes.begin(), bytes.end() - table_section - cut);
    b.insert(b.end(), bytes.end() - table_section, bytes.end());
    EXPECT_STATUS(DckvArtifact::Parse(reseal(b)), kCorruption) << cut;
  }
  // An encoder basis beside an encode scale: the codec refuses it, Serialize/Parse too.
  ASSERT_OK_AND_ASSIGN(DckvArtifact w, testing::WeightedArtifact(6.0));
  w.groups[0].encoder_basis = w.groups[0].basis;
  EXPECT_STATUS(DckvCodec::Create(w), kInvalidArgument);
  EXPECT_STATUS(DckvArtifact::Parse(w.Serialize()), kCorruption);
  // A non-finite encoder basis value.
  DckvArtifact nan = a;
  nan.groups[1].encoder_basis[2] = std::numeric_limits<float>::infinity();
  EXPECT_STATUS(DckvArtifact::Parse(nan.Serialize()), kCorruption);
}

}  // namespace
}  // namespace kvstash::dckv
