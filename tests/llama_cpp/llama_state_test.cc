// The llama.cpp sequence-state parser/writer on synthetic states (no libllama): a
// hand-derived byte layout, round trips over shapes and both V layouts, every
// truncation, every byte flip, and each refusal. The same checks against states that
// the real libllama wrote are in llama_state_real_test.cc.
#include "engines/llama_cpp/llama_state.h"
#include "common/kv_chunk_slice.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "tests/llama_cpp/state_regions.h"
#include "tests/support/test_util.h"

namespace kvstash::llama_cpp {
namespace {

StateLayout Layout(uint32_t layers, uint32_t heads, uint32_t dim, DType dtype, bool v_trans) {
  StateLayout s;
  s.kv = {layers, heads, dim, dtype};
  s.v_trans = v_trans;
  return s;
}

KvChunk RandomChunk(const KvLayout& layout, uint32_t tokens, uint32_t seed) {
  KvChunk c = KvChunk::Zeros(layout, tokens);
  std::mt19937 rng(seed);
  for (auto& b : c.data) b = static_cast<uint8_t>(rng());
  return c;
}

void PutU32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU16(std::vector<uint8_t>* out, uint16_t v) {
  out->push_back(static_cast<uint8_t>(v));
  out->push_back(static_cast<uint8_t>(v >> 8));
}

// 1 layer, 1 KV head, head_dim 2, f16, 2 tokens, sequence 3, written out by hand from
// llama-kv-cache.cpp state_write_meta/state_write_data.
std::vector<uint8_t> HandState(bool v_trans, const uint16_t k[4], const uint16_t v[4]) {
  std::vector<uint8_t> b;
  PutU32(&b, 0xaf143cd8u);  // magic
  PutU32(&b, 3);            // seq_id
  PutU32(&b, 1);            // n_stream
  PutU32(&b, 2);            // cell_count
  for (uint32_t i = 0; i < 2; ++i) {
    PutU32(&b, i);  // pos
    PutU32(&b, 1);  // n_seq_id
    PutU32(&b, 3);  // seq_id
  }
  PutU32(&b, v_trans ? 1 : 0);
  PutU32(&b, 1);  // n_layer
  PutU32(&b, 1);  // GGML_TYPE_F16
  PutU64(&b, 4);  // row bytes: 2 elements
  for (int i = 0; i < 4; ++i) PutU16(&b, k[i]);  // cell 0 [k0 k1], cell 1 [k2 k3]
  PutU32(&b, 1);
  if (v_trans) {
    PutU32(&b, 2);  // element bytes
    PutU32(&b, 2);  // n_embd_v_gqa
    // channel 0 of cells 0,1 then channel 1 of cells 0,1
    PutU16(&b, v[0]);
    PutU16(&b, v[2]);
    PutU16(&b, v[1]);
    PutU16(&b, v[3]);
  } else {
    PutU64(&b, 4);
    for (int i = 0; i < 4; ++i) PutU16(&b, v[i]);
  }
  return b;
}

TEST(LlamaStateTest, HandDerivedBytesBothVLayouts) {
  const uint16_t k[4] = {0x3c00, 0xbc00, 0x4000, 0x0001};
  const uint16_t v[4] = {0x1234, 0x5678, 0x9abc, 0xdef0};
  KvChunk c = KvChunk::Zeros({1, 1, 2, DType::kF16}, 2);
  std::memcpy(c.MutableK(0).data(), k, 8);
  std::memcpy(c.MutableV(0).data(), v, 8);
  for (bool vt : {true, false}) {
    const StateLayout lay = Layout(1, 1, 2, DType::kF16, vt);
    const std::vector<uint8_t> want = HandState(vt, k, v);
    EXPECT_EQ(lay.StateBytes(2), want.size());
    ASSERT_OK_AND_ASSIGN(auto got, WriteSeqState(lay, 3, std::span(&c, 1)));
    EXPECT_EQ(got, want) << "v_trans " << vt;
    ASSERT_OK_AND_ASSIGN(SeqState parsed, ParseSeqState(want, lay));
    EXPECT_EQ(parsed.seq_id, 3);
    EXPECT_EQ(parsed.kv.tokens, 2u);
    EXPECT_EQ(parsed.kv.data, c.data);
  }
}

TEST(LlamaStateTest, RoundTripOverShapesAndChunkSplits) {
  uint32_t seed = 1;
  for (DType dt : {DType::kF16, DType::kBF16}) {
    for (bool vt : {true, false}) {
      for (uint32_t tokens : {1u, 2u, 7u, 16u, 17u}) {
        const StateLayout lay = Layout(3, 2, 5, dt, vt);
        const KvChunk whole = RandomChunk(lay.kv, tokens, seed++);
        // Split into chunks of 4 tokens (and a remainder): the state of the concatenation.
        std::vector<KvChunk> parts;
        for (uint32_t t = 0; t < tokens; t += 4) {
          ASSERT_OK_AND_ASSIGN(KvChunk p, SliceTokens(whole, t, std::min(4u, tokens - t)));
          parts.push_back(std::move(p));
        }
        ASSERT_OK_AND_ASSIGN(auto from_parts, WriteSeqState(lay, 0, parts));
        ASSERT_OK_AND_ASSIGN(auto from_whole, WriteSeqState(lay, 0, std::span(&whole, 1)));
        EXPECT_EQ(from_parts, from_whole);
        EXPECT_EQ(from_whole.size(), lay.StateBytes(tokens));
        ASSERT_OK_AND_ASSIGN(SeqState parsed, ParseSeqState(from_whole, lay));
        EXPECT_EQ(parsed.kv.data, whole.data);
        ASSERT_OK_AND_ASSIGN(auto again, WriteSeqState(lay, parsed.seq_id, std::span(&parsed.kv, 1)));
        EXPECT_EQ(again, from_whole);
      }
    }
  }
}

// Llama-family K: canonical (rotate_half) channels [a0 a1 | a2 a3] of a head_dim-4 head
// are llama.cpp's interleaved pairs (a0 a2) (a1 a3), i.e. state bytes a0 a2 a1 a3.
TEST(LlamaStateTest, InterleavedRopeKIsPermutedPerHead) {
  StateLayout lay = Layout(1, 2, 4, DType::kF16, false);
  lay.k_rope_interleaved = true;
  KvChunk c = KvChunk::Zeros(lay.kv, 1);
  const uint16_t k[8] = {10, 11, 12, 13, 20, 21, 22, 23};  // head 0, head 1
  std::memcpy(c.MutableK(0).data(), k, 16);
  std::memcpy(c.MutableV(0).data(), k, 16);
  ASSERT_OK_AND_ASSIGN(auto bytes, WriteSeqState(lay, 0, std::span(&c, 1)));
  const size_t k_at = 16 + 12 + 8 + 12;
  const uint16_t want[8] = {10, 12, 11, 13, 20, 22, 21, 23};
  EXPECT_EQ(0, std::memcmp(bytes.data() + k_at, want, 16));
  EXPECT_EQ(0, std::memcmp(bytes.data() + k_at + 16 + 12, k, 16)) << "V is not permuted";
  ASSERT_OK_AND_ASSIGN(SeqState back, ParseSeqState(bytes, lay));
  EXPECT_EQ(back.kv.data, c.data);
  // Round trips over shapes with the permutation.
  for (bool vt : {true, false}) {
    StateLayout l2 = Layout(3, 2, 6, DType::kBF16, vt);
    l2.k_rope_interleaved = true;
    const KvChunk r = RandomChunk(l2.kv, 5, 77);
    ASSERT_OK_AND_ASSIGN(auto b2, WriteSeqState(l2, 1, std::span(&r, 1)));
    ASSERT_OK_AND_ASSIGN(SeqState p2, ParseSeqState(b2, l2));
    EXPECT_EQ(p2.kv.data, r.data);
  }
  StateLayout odd = Layout(1, 1, 3, DType::kF16, true);
  odd.k_rope_interleaved = true;
  EXPECT_STATUS(odd.Validate(), kInvalidArgument);
}

TEST(LlamaStateTest, EveryTruncationAndTrailingByteIsCorruption) {
  for (bool vt : {true, false}) {
    const StateLayout lay = Layout(2, 1, 3, DType::kBF16, vt);
    const KvChunk c = RandomChunk(lay.kv, 3, 7);
    ASSERT_OK_AND_ASSIGN(auto bytes, WriteSeqState(lay, 1, std::span(&c, 1)));
    for (size_t n = 0; n < bytes.size(); ++n) {
      EXPECT_STATUS(ParseSeqState(std::span(bytes).first(n), lay), kCorruption) << "length " << n;
    }
    bytes.push_back(0);
    EXPECT_STATUS(ParseSeqState(bytes, lay), kCorruption);
  }
}

TEST(LlamaStateTest, EveryByteFlipIsRefusedOrChangesOnlyData) {
  for (bool vt : {true, false}) {
    const StateLayout lay = Layout(2, 2, 3, DType::kF16, vt);
    const KvChunk c = RandomChunk(lay.kv, 4, 11);
    ASSERT_OK_AND_ASSIGN(auto bytes, WriteSeqState(lay, 2, std::span(&c, 1)));
    const std::vector<bool> data = state_regions::DataByteMask(lay, 4);
    ASSERT_EQ(data.size(), bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) {
      for (uint8_t mask : {uint8_t{0xff}, uint8_t{0x01}, uint8_t{0x80}}) {
        auto flipped = bytes;
        flipped[i] ^= mask;
        auto r = ParseSeqState(flipped, lay);
        if (data[i]) {
          ASSERT_TRUE(r.ok()) << "data byte " << i << ": " << r.status().ToString();
          EXPECT_NE(r->kv.ContentChecksum(), c.ContentChecksum()) << "data byte " << i;
        } else {
          EXPECT_FALSE(r.ok()) << "structure byte " << i << " mask " << int(mask);
        }
      }
    }
  }
}

TEST(LlamaStateTest, AnotherLayoutIsMismatch) {
  const StateLayout lay = Layout(2, 2, 4, DType::kF16, true);
  const KvChunk c = RandomChunk(lay.kv, 3, 5);
  ASSERT_OK_AND_ASSIGN(auto bytes, WriteSeqState(lay, 0, std::span(&c, 1)));
  EXPECT_OK(ParseSeqState(bytes, lay));
  EXPECT_STATUS(ParseSeqState(bytes, Layout(3, 2, 4, DType::kF16, true)), kMismatch);   // layers
  EXPECT_STATUS(ParseSeqState(bytes, Layout(2, 1, 4, DType::kF16, true)), kMismatch);   // heads
  EXPECT_STATUS(ParseSeqState(bytes, Layout(2, 2, 8, DType::kF16, true)), kMismatch);   // dim
  EXPECT_STATUS(ParseSeqState(bytes, Layout(2, 2, 4, DType::kBF16, true)), kMismatch);  // type
  auto r = ParseSeqState(bytes, Layout(2, 2, 4, DType::kF16, false));                    // FA
  EXPECT_STATUS(r, kMismatch);
  EXPECT_NE(r.status().message().find("V transposition"), std::string::npos);
}

TEST(LlamaStateTest, UnsupportedStatesAreRefused) {
  const StateLayout lay = Layout(1, 1, 2, DType::kF16, true);
  const uint16_t k[4] = {1, 2, 3, 4}, v[4] = {5, 6, 7, 8};
  const std::vector<uint8_t> good = HandState(true, k, v);
  ASSERT_OK(ParseSeqState(good, lay));
  auto set32 = [](std::vector<uint8_t> b, size_t off, uint32_t val) {
    std::memcpy(b.data() + off, &val, 4);
    return b;
  };
  EXPECT_STATUS(ParseSeqState(set32(good, 4, 0xffffffffu), lay), kNotSupported);  // seq -1
  EXPECT_STATUS(ParseSeqState(set32(good, 8, 2), lay), kNotSupported);   // two streams
  EXPECT_STATUS(ParseSeqState(set32(good, 16, 1), lay), kNotSupported);  // cell 0 at pos 1
  EXPECT_STATUS(ParseSeqState(set32(good, 28, 0), lay), kNotSupported);  // cell 1 at pos 0
  EXPECT_STATUS(ParseSeqState(set32(good, 20, 2), lay), kNotSupported);  // shared cell
  EXPECT_STATUS(ParseSeqState(set32(good, 20, 0), lay), kCorruption);    // no sequence
  EXPECT_STATUS(ParseSeqState(set32(good, 24, 4), lay), kCorruption);    // other sequence
  EXPECT_STATUS(ParseSeqState(set32(good, 0, 0x12345678u), lay), kCorruption);  // magic
  // An empty sequence's state: magic, seq, n_stream, cell_count 0.
  std::vector<uint8_t> empty(good.begin(), good.begin() + 16);
  std::memset(empty.data() + 12, 0, 4);
  EXPECT_STATUS(ParseSeqState(empty, lay), kNotSupported);
}

TEST(LlamaStateTest, WriterRefusesBadInput) {
  const StateLayout lay = Layout(2, 1, 2, DType::kF16, true);
  const KvChunk c = RandomChunk(lay.kv, 2, 3);
  EXPECT_STATUS(WriteSeqState(lay, 0, {}), kInvalidArgument);
  EXPECT_STATUS(WriteSeqState(lay, -1, std::span(&c, 1)), kInvalidArgument);
  const KvChunk other = RandomChunk({2, 1, 2, DType::kBF16}, 2, 3);
  EXPECT_STATUS(WriteSeqState(lay, 0, std::span(&other, 1)), kInvalidArgument);
  EXPECT_STATUS(WriteSeqState(Layout(2, 1, 2, DType::kF32, true), 0, std::span(&c, 1)),
                kInvalidArgument);
  KvChunk bad = c;
  bad.data.pop_back();
  EXPECT_STATUS(WriteSeqState(lay, 0, std::span(&bad, 1)), kInvalidArgument);
}

TEST(LlamaStateTest, SliceTokensCopiesTheRange) {
  const KvLayout kv{2, 2, 3, DType::kBF16};
  const KvChunk c = RandomChunk(kv, 5, 9);
  ASSERT_OK_AND_ASSIGN(KvChunk s, SliceTokens(c, 1, 3));
  const size_t tok = 2 * 3 * 2;
  for (uint32_t l = 0; l < 2; ++l) {
    EXPECT_EQ(0, std::memcmp(s.view().K(l).data(), c.view().K(l).data() + tok, 3 * tok));
    EXPECT_EQ(0, std::memcmp(s.view().V(l).data(), c.view().V(l).data() + tok, 3 * tok));
  }
  EXPECT_STATUS(SliceTokens(c, 3, 3), kInvalidArgument);
  EXPECT_STATUS(SliceTokens(c, 0, 0), kInvalidArgument);
  EXPECT_STATUS(SliceTokens(c, 6, 1), kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::llama_cpp
