// Host reference of the chunk <-> paged cache index maths (common/paged_kv.h), checked
// against hand-derived offsets and an independent nested-index formulation of vLLM's
// layouts. The CUDA kernels (gpu_kernels/kv_blocks.h) run the same element function;
// tests/gpu_kernels/kv_blocks_gpu_test.cc compares them to this reference.
#include "common/paged_kv.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace kvstash {
namespace {

constexpr uint16_t kUntouched = 0xFFFF;

// vLLM 0.32's CUDA layout, contiguous: per layer [num_blocks, H, B, 2 D], K in [0, D).
PagedKvTransfer Unified(uint32_t L, uint32_t H, uint32_t D, uint32_t T, uint32_t B, uint64_t blocks) {
  PagedKvTransfer x;
  x.n_layers = L, x.n_kv_heads = H, x.head_dim = D, x.chunk_tokens = T, x.t_begin = 0, x.t_end = T;
  x.block_size = B, x.num_blocks = blocks;
  x.strides = {.kv = D, .block = 2ull * H * B * D, .slot = 2ull * D, .head = 2ull * B * D};
  return x;
}

std::vector<uint16_t> Codes(size_t n) {  // value = canonical index + 1 (0xFFFF never used)
  std::vector<uint16_t> v(n);
  std::iota(v.begin(), v.end(), uint16_t{1});
  return v;
}

TEST(PagedKvTest, HandDerivedOffsets) {
  PagedKvTransfer x = Unified(2, 2, 3, 6, 4, 4);
  x.first_token = 2;
  const std::vector<int32_t> ids = {3, 0, 2};
  x.n_block_ids = 3;
  // token 0 -> position 2: block table entry 0 (block 3), slot 2; token 5 -> position 7:
  // entry 1 (block 0), slot 3.
  EXPECT_EQ(PagedKvBlockIndex(x, 0), 0u);
  EXPECT_EQ(PagedKvSlot(x, 0), 2u);
  EXPECT_EQ(PagedKvBlockIndex(x, 5), 1u);
  EXPECT_EQ(PagedKvSlot(x, 5), 3u);
  // (l 1, V, t 5, h 1, d 2): canonical ((2+1)*6+5)*6 + 1*3 + 2 = 143;
  // cache 1*3 (V) + 0*48 (block 0) + 3*6 (slot) + 1*24 (head) + 2 = 47.
  EXPECT_EQ(CanonicalKvOffset(6, 2, 3, 1, 1, 5, 1, 2), 143u);
  EXPECT_EQ(PagedKvCacheOffset(x.strides, 1, 0, 3, 1, 2), 47u);
  const uint64_t last = x.Count() - 1;  // elements ordered (l, kv, t, h, d): the last is that one
  EXPECT_EQ(x.Count(), 144u);
  const PagedKvElement e = PagedKvElementAt(x, ids.data(), last);
  EXPECT_EQ(e.layer, 1u);
  EXPECT_EQ(e.canonical, 143u);
  EXPECT_EQ(e.cache, 47u);
  // (l 0, K, t 0, h 0, d 1): canonical 1, cache block 3 slot 2: 3*48 + 2*6 + 1 = 157.
  const PagedKvElement f = PagedKvElementAt(x, ids.data(), 1);
  EXPECT_EQ(f.layer, 0u);
  EXPECT_EQ(f.canonical, 1u);
  EXPECT_EQ(f.cache, 157u);

  const std::vector<uint16_t> chunk = Codes(144);
  std::vector<uint16_t> c0(4 * 48, kUntouched), c1(4 * 48, kUntouched);
  uint16_t* layers[] = {c0.data(), c1.data()};
  ASSERT_TRUE(ScatterChunkHost(x, ids, chunk, layers).ok());
  EXPECT_EQ(c1[47], 144);
  EXPECT_EQ(c0[157], 2);
}

// Independent formulation: cache[layer][block][h][slot][kv * D + d] with nested loops
// over the request's positions, as vLLM's kernels index it.
TEST(PagedKvTest, ScatterMatchesNestedIndexing) {
  const uint32_t L = 3, H = 2, D = 4, T = 8, B = 4, N = 6;
  PagedKvTransfer x = Unified(L, H, D, T, B, N);
  x.first_token = 8;  // chunk 1 of a request with 4-token blocks
  const std::vector<int32_t> ids = {5, 1, 4, 2};
  x.n_block_ids = 4;
  x.t_begin = 2;      // the first 2 tokens are already in the engine's cache
  const std::vector<uint16_t> chunk = Codes(2ull * L * T * H * D);
  std::vector<std::vector<uint16_t>> got(L, std::vector<uint16_t>(N * H * B * 2 * D, kUntouched));
  std::vector<std::vector<uint16_t>> want = got;
  std::vector<uint16_t*> ptrs;
  for (auto& g : got) ptrs.push_back(g.data());
  ASSERT_TRUE(ScatterChunkHost(x, ids, chunk, ptrs).ok());
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t kv = 0; kv < 2; ++kv)
      for (uint32_t t = 2; t < T; ++t) {
        const uint64_t pos = 8 + t;
        const uint32_t block = ids[pos / B], slot = pos % B;
        for (uint32_t h = 0; h < H; ++h)
          for (uint32_t d = 0; d < D; ++d) {
            const size_t cache = ((static_cast<size_t>(block) * H + h) * B + slot) * 2 * D + kv * D + d;
            const size_t canon = (((static_cast<size_t>(l) * 2 + kv) * T + t) * H + h) * D + d;
            want[l][cache] = chunk[canon];
          }
      }
  EXPECT_EQ(got, want);
  // Positions 8..11 (tokens 0..3) are block table entry 2, block 4: tokens 0, 1 (slots
  // 0, 1) stay untouched, token 2 (slot 2) is written; entries 0, 1 (blocks 5, 1) are
  // never touched.
  EXPECT_EQ(got[0][((4 * H + 0) * B + 0) * 2 * D], kUntouched);
  EXPECT_EQ(got[0][((4 * H + 1) * B + 1) * 2 * D + D], kUntouched);
  EXPECT_EQ(got[0][((4 * H + 0) * B + 2) * 2 * D], chunk[(0 * T + 2) * H * D]);
  for (uint32_t b : {5u, 1u}) {
    for (size_t i = 0; i < size_t{H} * B * 2 * D; ++i) ASSERT_EQ(got[1][b * H * B * 2 * D + i], kUntouched);
  }
}

// flashinfer's older 5-D HND layout (num_blocks, 2, H, B, D): scatter then gather is
// the identity on the moved tokens.
TEST(PagedKvTest, HndRoundTrip) {
  const uint32_t L = 2, H = 3, D = 8, T = 16, B = 16, N = 3;
  PagedKvTransfer x;
  x.n_layers = L, x.n_kv_heads = H, x.head_dim = D, x.chunk_tokens = T, x.t_begin = 0, x.t_end = T;
  x.first_token = 32, x.block_size = B, x.num_blocks = N;
  x.strides = {.kv = 1ull * H * B * D, .block = 2ull * H * B * D, .slot = D, .head = 1ull * B * D};
  const std::vector<int32_t> ids = {0, 2, 1};
  x.n_block_ids = 3;
  const std::vector<uint16_t> chunk = Codes(2ull * L * T * H * D);
  std::vector<uint16_t> c0(N * 2 * H * B * D, kUntouched), c1 = c0;
  uint16_t* w[] = {c0.data(), c1.data()};
  ASSERT_TRUE(ScatterChunkHost(x, ids, chunk, w).ok());
  // Everything of block 1 (table entry 2) is written, blocks 0 and 2 untouched.
  for (size_t i = 0; i < c0.size(); ++i) {
    const bool in_block1 = i / (2 * H * B * D) == 1;
    ASSERT_EQ(c0[i] != kUntouched, in_block1) << i;
  }
  std::vector<uint16_t> back(chunk.size(), 0);
  const uint16_t* r[] = {c0.data(), c1.data()};
  ASSERT_TRUE(GatherChunkHost(x, ids, r, back).ok());
  EXPECT_EQ(back, chunk);
}

TEST(PagedKvTest, RejectsBadTransfers) {
  PagedKvTransfer x = Unified(1, 1, 2, 4, 2, 3);
  std::vector<int32_t> ids = {0, 1};
  x.n_block_ids = 2;
  std::vector<uint16_t> chunk(16), cache(3 * 1 * 2 * 4);
  uint16_t* layers[] = {cache.data()};
  EXPECT_TRUE(ScatterChunkHost(x, ids, chunk, layers).ok());
  x.first_token = 1;  // needs entry 2 for position 4
  EXPECT_EQ(ScatterChunkHost(x, ids, chunk, layers).code(), Status::Code::kInvalidArgument);
  x.first_token = 0;
  ids[1] = 3;  // block 3 of 3
  EXPECT_EQ(ScatterChunkHost(x, ids, chunk, layers).code(), Status::Code::kInvalidArgument);
  ids[1] = -1;
  EXPECT_EQ(ValidatePagedKvTransfer(x, ids).code(), Status::Code::kInvalidArgument);
  ids[1] = 1;
  x.t_end = 5;
  EXPECT_EQ(ValidatePagedKvTransfer(x, ids).code(), Status::Code::kInvalidArgument);
  x.t_end = 4;
  std::vector<uint16_t> small(15);
  EXPECT_EQ(ScatterChunkHost(x, ids, small, layers).code(), Status::Code::kInvalidArgument);
  std::vector<uint16_t*> none;
  EXPECT_EQ(ScatterChunkHost(x, ids, chunk, none).code(), Status::Code::kInvalidArgument);
  ids = {1, 1};  // one block for two table entries: two tokens would write one slot
  EXPECT_EQ(ValidatePagedKvTransfer(x, ids).code(), Status::Code::kInvalidArgument);
  ids = {0, 1};
  x.first_token = UINT64_MAX - 1;  // first_token + t_end wraps: entry 2^63 - 1 otherwise
  EXPECT_EQ(ScatterChunkHost(x, ids, chunk, layers).code(), Status::Code::kInvalidArgument);
  x.first_token = 0;
  EXPECT_TRUE(ScatterChunkHost(x, ids, chunk, layers).ok());
  x.block_size = 0;
  EXPECT_EQ(ValidatePagedKvTransfer(x, ids).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace kvstash
