// The CUDA dckv decoder's per-value bodies (codec/dckv/dckv_decode_element.h) run on
// the host, every index in the GPU decoder's launch order (both passes of every group,
// then the synthesis of every group), and must give exactly DckvCodec::Decode's bytes
// and the payload's content checksum: index maths, layouts and operation order of the
// GPU path are checked in CI without a GPU (tests/gpu_kernels/dckv_decode_gpu_test.cc
// runs the kernels themselves on a GPU). Plain, conditioned (with and without the
// checkerboard model, with and without token ids), weighted artifacts and artifacts
// with decoder correction nets (the net pass, then the synthesis with its output layer); chunk sizes
// 1, 2, odd, 32 +- 1, 100; offsets 0 and > 0; raw head and tail rows.
#include "codec/dckv/dckv_decode_element.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "codec/dckv/dckv_codec.h"
#include "codec/dckv/dckv_rope.h"
#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/support/test_util.h"

namespace kvstash::dckv {
namespace {

constexpr Digest256 kModel = {7, 7, 7};

// The GPU decoder's steps (gpu_kernels/dckv_decode.cu) on host memory, symbols from
// the CPU rANS decoder (the GPU one has its own bit-exactness tests).
Result<KvChunk> DecodeWithElements(const DckvCodec& codec, std::span<const uint8_t> payload) {
  const DckvArtifact& a = codec.artifact();
  KVSTASH_ASSIGN_OR_RETURN(DckvParsedPayload split, codec.SplitPayload(payload, kModel));
  uint32_t offset = 0;
  KVSTASH_ASSIGN_OR_RETURN(DckvQuantized q, codec.ParsePayload(payload, kModel, &offset));
  const uint32_t hr = a.HeadRow(), R = q.coded_rows();
  const uint64_t A = a.ActiveComponents(), per_token = 2ull * a.n_layers * hr;
  std::vector<uint16_t> even, odd;
  std::vector<uint64_t> group_offset;
  for (const DckvGroup& g : a.groups) {
    group_offset.push_back(even.size());
    even.insert(even.end(), g.table_index.begin(), g.table_index.end());
    odd.insert(odd.end(), g.odd_table_index.begin(), g.odd_table_index.end());
  }
  for (uint64_t s = 0; s < q.symbols.size(); ++s) {  // the stream's table of every symbol
    const uint16_t want = ((s / A) % 2 == 0 ? even : odd)[s % A];
    if (DckvSymbolTable(even.data(), odd.data(), A, s) != want) return Status::Internal("symbol table");
  }
  std::vector<float> coef(q.symbols.size(), -1.0f);  // every value must be written
  std::vector<uint16_t> out(per_token * q.tokens, 0xFFFF);
  const RopeTable rope(a.head_dim, a.rope_theta, offset + q.raw_head_rows, R);
  for (uint32_t parity = 0; parity < 2 && R > 0; ++parity) {
    for (size_t gi = 0; gi < a.groups.size(); ++gi) {
      const DckvGroup& g = a.groups[gi];
      const bool context = parity == 1 && !g.context_map.empty();
      DckvPassParams p;
      p.map = (context ? g.context_map : g.token_map).data();
      p.k = context ? g.context_inputs : 0;
      p.rank = a.conditioning.rank;
      p.n_active = g.n_active();
      p.parity = parity;
      p.rows = R;
      p.stride = A;
      p.offset = group_offset[gi];
      p.step = g.step.data();
      p.embed = a.conditioning.embed_bf16.data();
      p.token_ids = q.token_ids.empty() ? nullptr : q.token_ids.data();
      p.symbols = q.symbols.data();
      p.coef = coef.data();
      for (uint64_t t = 0; t < DckvPassCount(p); ++t) DckvPassElement(p, t);
    }
  }
  for (size_t gi = 0; gi < a.groups.size() && R > 0; ++gi) {
    const DckvGroup& g = a.groups[gi];
    const DckvNet& net = g.decoder_net;
    std::vector<float> hidden(static_cast<uint64_t>(R) * net.hidden, -1.0f);
    if (net.hidden > 0) {
      DckvNetHiddenParams h;
      h.w1 = net.w1.data();
      h.b1 = net.b1.data();
      h.hidden = net.hidden;
      h.n_active = g.n_active();
      h.rows = R;
      h.stride = A;
      h.offset = group_offset[gi];
      h.coef = coef.data();
      h.out = hidden.data();
      for (uint64_t t = 0; t < DckvNetHiddenCount(h); ++t) DckvNetHiddenElement(h, t);
    }
    DckvSynthesisParams p;
    p.mean = g.mean.data();
    p.basis = g.basis.data();
    p.n_active = g.n_active();
    p.dims = g.dims;
    p.first_layer = g.first_layer;
    p.n_kv_heads = a.n_kv_heads;
    p.head_dim = a.head_dim;
    p.rows = R;
    p.first_row = q.raw_head_rows;
    p.tokens = q.tokens;
    p.stride = A;
    p.offset = group_offset[gi];
    p.coef = coef.data();
    p.rope_cos = rope.cos_values().data();
    p.rope_sin = rope.sin_values().data();
    p.hidden = net.hidden;
    p.net_w2 = net.w2.data();
    p.net_b2 = net.b2.data();
    p.net_hidden = hidden.data();
    p.out = out.data();
    for (uint64_t t = 0; t < DckvSynthesisCount(p); ++t) DckvSynthesisElement(p, t);
  }
  for (uint32_t j = 0; j < q.raw_head_rows + q.raw_tail_rows; ++j) {
    const uint32_t t = j < q.raw_head_rows ? j : q.tokens - q.raw_tail_rows + (j - q.raw_head_rows);
    for (uint32_t lk = 0; lk < 2 * a.n_layers; ++lk) {
      std::memcpy(out.data() + (static_cast<uint64_t>(lk) * q.tokens + t) * hr,
                  q.raw_bf16.data() + j * per_token + lk * hr, 2ull * hr);
    }
  }
  KvChunk chunk = KvChunk::Zeros(codec.OutputLayout(), q.tokens);
  std::memcpy(chunk.data.data(), out.data(), chunk.data.size());
  if (chunk.ContentChecksum() != split.content_checksum) return Status::Corruption("checksum");
  return chunk;
}

void ExpectSameDecode(const DckvCodec& codec, const DckvRows& rows, uint32_t offset, uint32_t len,
                      uint32_t prefix_tokens, bool ids, DType dtype) {
  const std::string what = "offset " + std::to_string(offset) + " tokens " + std::to_string(len) +
                           " prefix " + std::to_string(prefix_tokens) + (ids ? " ids" : " no ids");
  const KvChunk chunk = testing::MakeChunk(rows, offset, offset + len, dtype);
  std::span<const uint32_t> tokens;
  if (ids) tokens = std::span<const uint32_t>(rows.tokens.data() + offset, len);
  ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), tokens, offset, prefix_tokens, kModel));
  ASSERT_OK_AND_ASSIGN(KvChunk cpu, codec.Decode(payload, kModel));
  auto elements = DecodeWithElements(codec, payload);
  ASSERT_TRUE(elements.ok()) << what << ": " << elements.status().ToString();
  EXPECT_EQ(elements->data, cpu.data) << what;
}

TEST(DckvDecodeElements, PlainArtifactGivesTheCpuBytes) {
  const auto eval = testing::MakeRows(200, 1);
  for (uint32_t group_layers : {2u, 3u}) {
    ASSERT_OK_AND_ASSIGN(auto artifact, testing::PlainArtifact(6.0, group_layers));
    ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(std::move(artifact)));
    for (uint32_t len : {1u, 2u, 7u, 31u, 32u, 33u, 100u}) {
      for (uint32_t offset : {0u, 9u}) {
        for (uint32_t prefix : {200u, offset + len})
          ExpectSameDecode(codec, eval, offset, len, prefix, false, DType::kBF16);
      }
    }
    ExpectSameDecode(codec, eval, 5, 33, 200, false, DType::kF32);
  }
}

TEST(DckvDecodeElements, ConditionedArtifactsGiveTheCpuBytes) {
  const auto eval = testing::MakeConditionedRows(160, 1);
  for (bool checkerboard : {true, false}) {
    ASSERT_OK_AND_ASSIGN(auto artifact, testing::ConditionedArtifact(6.0, checkerboard));
    ASSERT_EQ(artifact.groups[0].context_map.empty(), !checkerboard);
    ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(std::move(artifact)));
    for (uint32_t len : {1u, 2u, 7u, 8u, 31u, 32u, 33u, 100u}) {
      for (uint32_t offset : {0u, 1u, 40u}) {
        for (bool ids : {true, false}) ExpectSameDecode(codec, eval, offset, len, 160, ids, DType::kBF16);
      }
    }
    ExpectSameDecode(codec, eval, 50, 33, 83, true, DType::kBF16);  // with a raw tail
  }
}

TEST(DckvDecodeElements, WeightedArtifactGivesTheCpuBytes) {
  ASSERT_OK_AND_ASSIGN(auto artifact, testing::WeightedArtifact(4.0));
  ASSERT_FALSE(artifact.groups[0].encode_scale.empty());
  ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(std::move(artifact)));
  const auto eval = testing::MakeRows(200, 3);
  for (uint32_t len : {1u, 33u, 100u}) ExpectSameDecode(codec, eval, 17, len, 200, false, DType::kF32);
}

// Decoder correction nets in every group (random weights, last layers small enough to
// keep the reconstruction near the rows, large enough to change bf16 values), on the
// plain and the conditioned artifacts; one group's net with a zero last layer.
TEST(DckvDecodeElements, DecoderNetsGiveTheCpuBytes) {
  ASSERT_OK_AND_ASSIGN(const DckvArtifact plain, testing::PlainArtifact(6.0, 2));
  ASSERT_OK_AND_ASSIGN(const DckvArtifact conditioned, testing::ConditionedArtifact(6.0, true));
  for (const DckvArtifact* base : {&plain, &conditioned}) {
    DckvArtifact a = *base;
    for (size_t gi = 0; gi < a.groups.size(); ++gi) {
      DckvGroup& g = a.groups[gi];
      const float scale = gi == 1 ? 0.0f : 2e-3f;
      g.decoder_net = testing::RandomNet(gi == 0 ? 16 : 5, g.n_active(), g.dims, scale, 40 + gi);
    }
    ASSERT_TRUE(a.HasDecoderCorrection());
    ASSERT_OK_AND_ASSIGN(auto codec, DckvCodec::Create(a));
    ASSERT_OK_AND_ASSIGN(auto linear, DckvCodec::Create(*base));
    const bool ids = base == &conditioned;
    const auto eval = ids ? testing::MakeConditionedRows(160, 1) : testing::MakeRows(200, 1);
    for (uint32_t len : {1u, 2u, 7u, 33u, 100u}) {
      for (uint32_t offset : {0u, 9u}) ExpectSameDecode(codec, eval, offset, len, 160, ids, DType::kBF16);
    }
    // The nets change the decoded values (so the elements above really ran them).
    const KvChunk chunk = testing::MakeChunk(eval, 9, 109, DType::kBF16);
    std::span<const uint32_t> tokens;
    if (ids) tokens = std::span<const uint32_t>(eval.tokens.data() + 9, 100);
    ASSERT_OK_AND_ASSIGN(auto with_net, codec.Encode(chunk.view(), tokens, 9, 160, kModel));
    ASSERT_OK_AND_ASSIGN(auto without, linear.Encode(chunk.view(), tokens, 9, 160, kModel));
    ASSERT_OK_AND_ASSIGN(KvChunk a_out, codec.Decode(with_net, kModel));
    ASSERT_OK_AND_ASSIGN(KvChunk b_out, linear.Decode(without, kModel));
    EXPECT_NE(a_out.data, b_out.data);
  }
}

}  // namespace
}  // namespace kvstash::dckv
