#include "codec/dckv/dckv_codec.h"

#include <gtest/gtest.h>

#include "codec/dckv/dckv_calibration.h"
#include "common/worker_threads.h"
#include "kvstash/payload_format.h"
#include "tests/codec/dckv/dckv_test_data.h"
#include "tests/support/test_util.h"

namespace kvstash::dckv {
namespace {

constexpr Digest256 kModel = {1, 2, 3};

DckvCodec MakeCodec(double ratio, uint32_t raw_head = 2, uint32_t raw_tail = 3) {
  auto rows = testing::MakeRows(800, 0);  // calibration stream
  auto basis = FitDckvBasis(rows, 2);
  EXPECT_TRUE(basis.ok());
  DckvRateOptions o;
  o.target_ratio = ratio;
  o.raw_head = raw_head;
  o.raw_tail = raw_tail;
  auto a = MakeDckvArtifact(*basis, o);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  auto c = DckvCodec::Create(std::move(*a));
  EXPECT_TRUE(c.ok());
  return std::move(*c);
}

double Mse(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return s / a.size();
}

// Entropy-coded symbols and raw rows come back exactly; Decode equals the encoder's
// own reconstruction (which the content checksum also pins). Sizes 1, odd, 32 +- 1.
TEST(DckvCodec, SymbolsRoundTripExactly) {
  const auto codec = MakeCodec(6.0);
  const auto eval = testing::MakeRows(200, 1);  // disjoint stream
  for (uint32_t tokens : {1u, 7u, 31u, 32u, 33u, 100u}) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      const uint32_t offset = 9;
      const auto chunk = testing::MakeChunk(eval, offset, offset + tokens, dt);
      ASSERT_OK_AND_ASSIGN(auto q, codec.Quantize(chunk.view(), offset, 200));
      ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), offset, 200, kModel));
      uint32_t got_offset = 0;
      ASSERT_OK_AND_ASSIGN(auto back, codec.ParsePayload(payload, kModel, &got_offset));
      EXPECT_EQ(got_offset, offset);
      EXPECT_EQ(back.symbols, q.symbols) << tokens;
      EXPECT_EQ(back.raw_bf16, q.raw_bf16);
      EXPECT_EQ(back.raw_head_rows, q.raw_head_rows);
      EXPECT_EQ(back.raw_tail_rows, q.raw_tail_rows);
      ASSERT_OK_AND_ASSIGN(auto decoded, codec.Decode(payload, kModel));
      ASSERT_OK_AND_ASSIGN(auto rec, codec.Reconstruct(q, offset));
      EXPECT_EQ(decoded.data, rec.data);
      // bf16 out for bf16/f32 in, f16 out for f16 in (llama.cpp's cache type).
      EXPECT_EQ(decoded.layout.dtype, dt == DType::kF16 ? DType::kF16 : DType::kBF16);
      EXPECT_EQ(back.out_dtype, decoded.layout.dtype);
      ASSERT_OK_AND_ASSIGN(auto header, ParsePayloadHeader(payload));
      EXPECT_EQ(header.codec, CodecId::kDckv);
      EXPECT_TRUE(header.flags & kPayloadFlagLossy);
      EXPECT_EQ(header.artifact_digest, codec.digest());
    }
  }
}

// The OS refusing worker threads (EAGAIN) neither aborts nor changes a byte: the payload
// and the decoded chunk equal those of one thread, whether no thread or one then none
// could be started.
TEST(DckvCodec, RefusedWorkerThreadsChangeNoByte) {
  auto codec = MakeCodec(6.0);
  const auto eval = testing::MakeRows(100, 1);
  const auto chunk = testing::MakeChunk(eval, 0, 100, DType::kBF16);
  codec.set_threads(1);
  ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), 0, 100, kModel));
  ASSERT_OK_AND_ASSIGN(auto decoded, codec.Decode(payload, kModel));
  codec.set_threads(4);
  const uint64_t failures = ThreadSpawnFailures();
  for (int allow : {0, 1}) {
    SCOPED_TRACE(allow);
    RefuseThreadSpawnsForTesting(allow, 1);
    ASSERT_OK_AND_ASSIGN(auto many, codec.Encode(chunk.view(), 0, 100, kModel));
    EXPECT_EQ(many, payload);
    RefuseThreadSpawnsForTesting(allow, 1);
    ASSERT_OK_AND_ASSIGN(auto back, codec.Decode(payload, kModel));
    EXPECT_EQ(back.data, decoded.data);
  }
  EXPECT_GE(ThreadSpawnFailures(), failures + 4);
}

// Raw positions per chunk of a 10-token prefix stored in chunks of 4 with raw_head 2
// and raw_tail 3: [0,4) head 2; [4,8) tail 1 (position 7); [8,10) tail 2. Raw rows
// decode to the input's bf16 (or f16) values exactly.
TEST(DckvCodec, RawHeadAndTailPerChunk) {
  const auto codec = MakeCodec(6.0, 2, 3);
  const auto eval = testing::MakeRows(10, 2);
  const uint32_t expect_head[] = {2, 0, 0}, expect_tail[] = {0, 1, 2};
  for (uint32_t c = 0; c < 6; ++c) {
    const uint32_t b = 4 * (c % 3), e = std::min(10u, b + 4);
    const auto chunk = testing::MakeChunk(eval, b, e, c < 3 ? DType::kBF16 : DType::kF16);
    ASSERT_OK_AND_ASSIGN(auto q, codec.Quantize(chunk.view(), b, 10));
    EXPECT_EQ(q.raw_head_rows, expect_head[c % 3]);
    EXPECT_EQ(q.raw_tail_rows, expect_tail[c % 3]);
    ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), b, 10, kModel));
    ASSERT_OK_AND_ASSIGN(auto decoded, codec.Decode(payload, kModel));
    const auto in = testing::ChunkValues(chunk), out = testing::ChunkValues(decoded);
    const uint64_t per_token = chunk.layout.ScalarsPerToken();
    const uint64_t per_tensor_row = testing::kHeads * testing::kHeadDim;
    for (uint32_t t = 0; t < e - b; ++t) {
      const bool raw = t < q.raw_head_rows || t >= (e - b) - q.raw_tail_rows;
      if (!raw) continue;
      for (uint64_t l2 = 0; l2 < per_token / per_tensor_row; ++l2) {  // K_l / V_l tensors
        for (uint64_t i = 0; i < per_tensor_row; ++i) {
          const uint64_t at = l2 * (e - b) * per_tensor_row + t * per_tensor_row + i;
          ASSERT_EQ(in[at], out[at]) << "chunk " << c << " t " << t;
        }
      }
    }
  }
  // A whole prefix within raw_head + raw_tail: everything raw, no stream.
  const auto tiny = testing::MakeChunk(eval, 0, 4, DType::kBF16);
  ASSERT_OK_AND_ASSIGN(auto q, codec.Quantize(tiny.view(), 0, 4));
  EXPECT_EQ(q.coded_rows(), 0u);
  EXPECT_TRUE(q.symbols.empty());
  ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(tiny.view(), 0, 4, kModel));
  ASSERT_OK_AND_ASSIGN(auto decoded, codec.Decode(payload, kModel));
  EXPECT_EQ(decoded.data, tiny.data);
}

TEST(DckvCodec, ErrorDecreasesWithRate) {
  const auto eval = testing::MakeRows(300, 3);
  const auto chunk = testing::MakeChunk(eval, 0, 300, DType::kF32);
  const auto in = testing::ChunkValues(chunk);
  double prev_mse = 1e30;
  size_t prev_bytes = 0;
  for (double ratio : {24.0, 12.0, 6.0, 3.0}) {
    const auto codec = MakeCodec(ratio, 0, 0);
    ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), 0, 300, kModel));
    ASSERT_OK_AND_ASSIGN(auto decoded, codec.Decode(payload, kModel));
    const double mse = Mse(in, testing::ChunkValues(decoded));
    EXPECT_LT(mse, prev_mse) << ratio;
    EXPECT_GT(payload.size(), prev_bytes) << ratio;
    prev_mse = mse;
    prev_bytes = payload.size();
  }
  // At 3x the rows (6 latent factors) are reconstructed closely: variance per value is
  // O(10), so an MSE below 0.05 means the structure was captured.
  EXPECT_LT(prev_mse, 0.05);
}

TEST(DckvCodec, CorruptPayloadsAreRejected) {
  const auto codec = MakeCodec(6.0);
  const auto eval = testing::MakeRows(64, 4);
  const auto chunk = testing::MakeChunk(eval, 0, 64, DType::kBF16);
  ASSERT_OK_AND_ASSIGN(auto payload, codec.Encode(chunk.view(), 0, 64, kModel));
  for (size_t i = 0; i < payload.size(); i += 7) {
    auto bad = payload;
    bad[i] ^= 0x41;
    EXPECT_STATUS(codec.Decode(bad, kModel), kCorruption) << i;
  }
  for (size_t n : {size_t{0}, size_t{100}, size_t{136}, payload.size() - 1}) {
    EXPECT_STATUS(codec.Decode(std::span(payload).first(n), kModel), kCorruption) << n;
  }
  EXPECT_STATUS(codec.Decode(payload, Digest256{9}), kMismatch);
  const auto other = MakeCodec(12.0);
  EXPECT_STATUS(other.Decode(payload, kModel), kMismatch);
}

TEST(DckvCodec, BadInputIsInvalidArgument) {
  const auto codec = MakeCodec(6.0);
  const auto eval = testing::MakeRows(8, 5);
  const auto chunk = testing::MakeChunk(eval, 0, 8, DType::kBF16);
  EXPECT_STATUS(codec.Encode(chunk.view(), 4, 8, kModel), kInvalidArgument);  // past the prefix
  KvChunk wrong = KvChunk::Zeros({2, testing::kHeads, testing::kHeadDim, DType::kBF16}, 8);
  EXPECT_STATUS(codec.Encode(wrong.view(), 0, 8, kModel), kInvalidArgument);
  KvChunk fp8 = KvChunk::Zeros({testing::kLayers, testing::kHeads, testing::kHeadDim, DType::kFP8E4M3}, 8);
  EXPECT_STATUS(codec.Encode(fp8.view(), 0, 8, kModel), kInvalidArgument);
}

// f16 in, f16 out: the decoded values are the same fp32 reconstruction rounded to f16
// instead of bf16, so they are at least as close to the input (f16 has 3 more mantissa
// bits at these magnitudes); DecodeFp8 takes bf16 payloads only.
TEST(DckvCodec, F16InputDecodesToF16) {
  const auto codec = MakeCodec(6.0, 0, 0);
  const auto eval = testing::MakeRows(64, 6);
  const auto c16 = testing::MakeChunk(eval, 0, 64, DType::kF16);
  const auto c32 = testing::MakeChunk(eval, 0, 64, DType::kF32);
  ASSERT_OK_AND_ASSIGN(auto p16, codec.Encode(c16.view(), 0, 64, kModel));
  ASSERT_OK_AND_ASSIGN(auto pbf, codec.Encode(c32.view(), 0, 64, kModel));
  ASSERT_OK_AND_ASSIGN(auto d16, codec.Decode(p16, kModel));
  ASSERT_OK_AND_ASSIGN(auto dbf, codec.Decode(pbf, kModel));
  EXPECT_EQ(d16.layout.dtype, DType::kF16);
  ASSERT_OK_AND_ASSIGN(auto header, ParsePayloadHeader(p16));
  EXPECT_EQ(header.layout.dtype, DType::kF16);
  const auto in = testing::ChunkValues(c32);
  EXPECT_LE(Mse(in, testing::ChunkValues(d16)), Mse(in, testing::ChunkValues(dbf)) * 1.01);
  EXPECT_STATUS(codec.DecodeFp8(p16, kModel), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::dckv
