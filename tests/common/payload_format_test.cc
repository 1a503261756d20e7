#include "kvstash/payload_format.h"

#include <gtest/gtest.h>

#include <random>

#include "common/byte_io.h"
#include "common/checksum.h"
#include "tests/support/test_util.h"

namespace kvstash {
namespace {

PayloadHeader SampleHeader() {
  PayloadHeader h;
  h.codec = CodecId::kSpec;
  h.flags = kPayloadFlagPartialChunk;
  h.layout = {30, 3, 64, DType::kBF16};
  h.tokens = 100;
  h.token_offset = 512;
  for (int i = 0; i < 32; ++i) {
    h.artifact_digest[i] = static_cast<uint8_t>(i);
    h.model_fingerprint[i] = static_cast<uint8_t>(255 - i);
  }
  h.content_checksum = 0x0123456789ABCDEFull;
  return h;
}

TEST(PayloadFormatTest, HeaderLayoutIsAsDocumented) {
  std::vector<uint8_t> body = {1, 2, 3};
  ASSERT_OK_AND_ASSIGN(auto bytes, BuildPayload(SampleHeader(), body));
  ASSERT_EQ(bytes.size(), 136u + 3);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "KVSP");
  EXPECT_EQ(LoadLe<uint16_t>(&bytes[4]), 1);    // version
  EXPECT_EQ(LoadLe<uint16_t>(&bytes[6]), 136);  // header bytes
  EXPECT_EQ(LoadLe<uint16_t>(&bytes[8]), 1);    // codec spec
  EXPECT_EQ(bytes[12], static_cast<uint8_t>(DType::kBF16));
  EXPECT_EQ(LoadLe<uint32_t>(&bytes[16]), 30u);
  EXPECT_EQ(LoadLe<uint32_t>(&bytes[28]), 100u);
  EXPECT_EQ(LoadLe<uint32_t>(&bytes[32]), 512u);
  EXPECT_EQ(bytes[40], 0);
  EXPECT_EQ(bytes[72], 255);
  EXPECT_EQ(LoadLe<uint64_t>(&bytes[104]), 0x0123456789ABCDEFull);
  EXPECT_EQ(LoadLe<uint64_t>(&bytes[112]), 3u);
  EXPECT_EQ(LoadLe<uint64_t>(&bytes[120]), Xxh3_64(body));
  EXPECT_EQ(LoadLe<uint32_t>(&bytes[128]), Crc32c(std::span(bytes).first(128)));
}

TEST(PayloadFormatTest, RoundTrip) {
  std::vector<uint8_t> body(1000);
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<uint8_t>(i * 7);
  PayloadHeader h = SampleHeader();
  ASSERT_OK_AND_ASSIGN(auto bytes, BuildPayload(h, body));
  ASSERT_OK_AND_ASSIGN(PayloadView v, ParsePayload(bytes));
  h.body_bytes = body.size();
  h.body_checksum = Xxh3_64(body);
  EXPECT_EQ(v.header, h);
  EXPECT_TRUE(std::equal(v.body.begin(), v.body.end(), body.begin(), body.end()));
  // Empty body is legal (e.g. a codec whose state is all in the header).
  ASSERT_OK_AND_ASSIGN(auto empty, BuildPayload(SampleHeader(), {}));
  EXPECT_OK(ParsePayload(empty));
}

TEST(PayloadFormatTest, EveryByteFlipIsDetected) {
  std::vector<uint8_t> body(64, 5);
  ASSERT_OK_AND_ASSIGN(auto bytes, BuildPayload(SampleHeader(), body));
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto bad = bytes;
    bad[i] ^= 0x10;
    const Status s = ParsePayload(bad).status();
    EXPECT_FALSE(s.ok()) << "flip at byte " << i;
    EXPECT_TRUE(s.IsCorruption() || s.IsMismatch()) << s.ToString();
  }
}

TEST(PayloadFormatTest, TruncationAndVersion) {
  ASSERT_OK_AND_ASSIGN(auto bytes, BuildPayload(SampleHeader(), std::vector<uint8_t>(10, 1)));
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_STATUS(ParsePayload(std::span(bytes).first(n)), kCorruption) << n;
  }
  auto extra = bytes;
  extra.push_back(0);
  EXPECT_STATUS(ParsePayload(extra), kCorruption);
  // A future version with a valid CRC is a Mismatch, not Corruption.
  auto v3 = bytes;
  StoreLe<uint16_t>(&v3[4], 3);
  StoreLe<uint32_t>(&v3[128], Crc32c(std::span(v3).first(128)));
  EXPECT_STATUS(ParsePayload(v3), kMismatch);
  // Version 2 with version 1's header size: the size field does not match the version.
  auto v2 = bytes;
  StoreLe<uint16_t>(&v2[4], 2);
  StoreLe<uint32_t>(&v2[128], Crc32c(std::span(v2).first(128)));
  EXPECT_STATUS(ParsePayload(v2), kCorruption);
}

StoredKey SampleKey(uint8_t seed) {
  StoredKey k{};
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(seed + 11 * i);
  return k;
}

TEST(PayloadFormatTest, BoundHeaderLayoutIsAsDocumented) {
  const std::vector<uint8_t> body = {1, 2, 3};
  PayloadHeader h = SampleHeader();
  h.chunk_key = SampleKey(7);
  ASSERT_OK_AND_ASSIGN(auto bytes, BuildPayload(h, body));
  ASSERT_EQ(bytes.size(), 152u + 3);
  EXPECT_EQ(LoadLe<uint16_t>(&bytes[4]), 2);    // version
  EXPECT_EQ(LoadLe<uint16_t>(&bytes[6]), 152);  // header bytes
  // Bytes 8..127 are version 1's fields at version 1's offsets.
  ASSERT_OK_AND_ASSIGN(auto unbound, BuildPayload(SampleHeader(), body));
  EXPECT_TRUE(std::equal(bytes.begin() + 8, bytes.begin() + 128, unbound.begin() + 8));
  EXPECT_TRUE(std::equal(bytes.begin() + 128, bytes.begin() + 144, h.chunk_key->begin()));
  EXPECT_EQ(LoadLe<uint32_t>(&bytes[144]), Crc32c(std::span(bytes).first(144)));
  EXPECT_EQ(LoadLe<uint32_t>(&bytes[148]), 0u);  // reserved
  EXPECT_TRUE(std::equal(bytes.begin() + 152, bytes.end(), body.begin()));
}

TEST(PayloadFormatTest, BindingRoundTripsAndEveryByteFlipIsDetected) {
  const std::vector<uint8_t> body(64, 5);
  ASSERT_OK_AND_ASSIGN(auto unbound, BuildPayload(SampleHeader(), body));
  ASSERT_OK_AND_ASSIGN(auto bound, BindPayloadToKey(unbound, SampleKey(1)));
  ASSERT_OK_AND_ASSIGN(PayloadView v, ParsePayload(bound));
  EXPECT_EQ(v.header.chunk_key, SampleKey(1));
  EXPECT_EQ(v.header.header_bytes(), 152u);
  EXPECT_TRUE(std::equal(v.body.begin(), v.body.end(), body.begin(), body.end()));
  PayloadHeader want = SampleHeader();
  want.body_bytes = body.size();
  want.body_checksum = Xxh3_64(body);
  want.chunk_key = SampleKey(1);
  EXPECT_EQ(v.header, want);
  // Binding again to the same key changes nothing; to another key is refused.
  ASSERT_OK_AND_ASSIGN(auto again, BindPayloadToKey(bound, SampleKey(1)));
  EXPECT_EQ(again, bound);
  EXPECT_STATUS(BindPayloadToKey(bound, SampleKey(2)), kInvalidArgument);
  for (size_t i = 0; i < bound.size(); ++i) {
    auto bad = bound;
    bad[i] ^= 0x10;
    const Status s = ParsePayload(bad).status();
    EXPECT_FALSE(s.ok()) << "flip at byte " << i;
    EXPECT_TRUE(s.IsCorruption() || s.IsMismatch()) << s.ToString();
  }
  for (size_t n = 0; n < bound.size(); ++n) {
    EXPECT_STATUS(ParsePayload(std::span(bound).first(n)), kCorruption) << n;
  }
}

TEST(PayloadFormatTest, CheckPayloadKeyTellsAnotherKeyFromNoKey) {
  ASSERT_OK_AND_ASSIGN(auto unbound, BuildPayload(SampleHeader(), std::vector<uint8_t>(8, 1)));
  ASSERT_OK_AND_ASSIGN(auto bound, BindPayloadToKey(unbound, SampleKey(3)));
  EXPECT_OK(CheckPayloadKey(bound, SampleKey(3)));
  // The valid payload of another chunk: Corruption, never accepted.
  EXPECT_STATUS(CheckPayloadKey(bound, SampleKey(4)), kCorruption);
  // A version-1 payload cannot be tied to any key: Mismatch (recompute, store again).
  EXPECT_STATUS(CheckPayloadKey(unbound, SampleKey(3)), kMismatch);
  EXPECT_STATUS(CheckPayloadKey(std::span(bound).first(20), SampleKey(3)), kCorruption);
}

TEST(PayloadFormatTest, RejectsInvalidLayoutEvenWithValidCrc) {
  ASSERT_OK_AND_ASSIGN(auto bytes, BuildPayload(SampleHeader(), {}));
  auto bad = bytes;
  StoreLe<uint32_t>(&bad[24], 0);  // head_dim 0
  StoreLe<uint32_t>(&bad[128], Crc32c(std::span(bad).first(128)));
  EXPECT_STATUS(ParsePayloadHeader(bad), kCorruption);
  bad = bytes;
  bad[12] = 42;  // dtype
  StoreLe<uint32_t>(&bad[128], Crc32c(std::span(bad).first(128)));
  EXPECT_STATUS(ParsePayloadHeader(bad), kCorruption);
  PayloadHeader h = SampleHeader();
  h.layout.n_layers = 0;
  std::vector<uint8_t> out;
  EXPECT_STATUS(AppendPayloadHeader(h, &out), kInvalidArgument);
  EXPECT_TRUE(out.empty());
}

RecurrentState SampleState() {
  RecurrentState s;
  s.boundary_tokens = 512;
  std::vector<uint8_t> a(2 * 4 * 4), b(3 * 2);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(200 + i);
  s.tensors.push_back({"layers.0.delta_state", DType::kF32, {2, 4}, a});
  s.tensors.push_back({"layers.0.conv_state", DType::kBF16, {3}, b});
  return s;
}

TEST(StateRecordTest, RoundTripExact) {
  Digest256 fp{};
  fp[0] = 7;
  ASSERT_OK_AND_ASSIGN(auto bytes, EncodeStateRecord(SampleState(), fp));
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "KVSS");
  ASSERT_OK_AND_ASSIGN(DecodedStateRecord rec, DecodeStateRecord(bytes));
  EXPECT_EQ(rec.state, SampleState());
  EXPECT_EQ(rec.model_fingerprint, fp);
  EXPECT_EQ(rec.state.ContentChecksum(), SampleState().ContentChecksum());
}

TEST(StateRecordTest, CorruptionTruncationAndBadInput) {
  ASSERT_OK_AND_ASSIGN(auto bytes, EncodeStateRecord(SampleState(), Digest256{}));
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto bad = bytes;
    bad[i] ^= 0x01;
    const Status s = DecodeStateRecord(bad).status();
    EXPECT_TRUE(s.IsCorruption() || s.IsMismatch()) << i << " " << s.ToString();
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeStateRecord(std::span(bytes).first(n)).ok()) << n;
  }
  RecurrentState bad = SampleState();
  bad.tensors[0].data.pop_back();
  EXPECT_STATUS(EncodeStateRecord(bad, Digest256{}), kInvalidArgument);
}

TEST(StateRecordTest, RandomGarbageNeverCrashes) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> junk(rng() % 300);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    if (junk.size() >= 4 && (i % 2) == 0) {
      junk[0] = 'K', junk[1] = 'V', junk[2] = 'S', junk[3] = 'S';
    }
    EXPECT_FALSE(DecodeStateRecord(junk).ok());
    EXPECT_FALSE(ParsePayload(junk).ok());
  }
}

}  // namespace
}  // namespace kvstash
