// The CUDA paged KV scatter/gather (gpu_kernels/kv_blocks.h) against the host
// reference of common/paged_kv.h (itself tested on the CPU: tests/common/
// paged_kv_test.cc), byte for byte, on vLLM 0.32's CUDA layout and the 5-D HND one.
#include "gpu_kernels/kv_blocks.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "tests/gpu_kernels/gpu_test_util.h"

namespace kvstash::gpu {
namespace {

using testing::DeviceBuffer;

struct Case {
  PagedKvTransfer x;
  std::vector<int32_t> ids;
  uint64_t layer_elems;
};

// SmolLM2-135M's shape (30 layers, 3 KV heads, 64 dims), 16-token blocks, a 64-token
// chunk at position 64 whose first 5 tokens are already cached, shuffled block table.
Case Unified() {
  Case c;
  PagedKvTransfer& x = c.x;
  x.n_layers = 30, x.n_kv_heads = 3, x.head_dim = 64, x.chunk_tokens = 64;
  x.t_begin = 5, x.t_end = 64, x.first_token = 64, x.block_size = 16, x.num_blocks = 40;
  x.strides = {.kv = 64, .block = 2ull * 3 * 16 * 64, .slot = 2 * 64, .head = 2ull * 16 * 64};
  c.ids = {7, 3, 39, 0, 12, 5, 21, 8};
  x.n_block_ids = c.ids.size();
  c.layer_elems = x.num_blocks * x.strides.block;
  return c;
}

// (num_blocks, 2, H, B, D): flashinfer's HND pages.
Case Hnd() {
  Case c;
  PagedKvTransfer& x = c.x;
  x.n_layers = 4, x.n_kv_heads = 2, x.head_dim = 128, x.chunk_tokens = 32;
  x.t_begin = 0, x.t_end = 32, x.first_token = 0, x.block_size = 16, x.num_blocks = 6;
  x.strides = {.kv = 2ull * 16 * 128, .block = 2ull * 2 * 16 * 128, .slot = 128, .head = 16ull * 128};
  c.ids = {4, 1};
  x.n_block_ids = 2;
  c.layer_elems = x.num_blocks * x.strides.block;
  return c;
}

std::vector<uint16_t> RandomBits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = static_cast<uint16_t>(rng());
  return v;
}

void CheckScatterAndGather(const Case& c) {
  const PagedKvTransfer& x = c.x;
  const size_t chunk_elems = 2ull * x.n_layers * x.chunk_tokens * x.n_kv_heads * x.head_dim;
  const std::vector<uint16_t> chunk = RandomBits(chunk_elems, 1);
  // Scatter: reference on host copies of the same initial caches.
  std::vector<std::vector<uint16_t>> want;
  std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> dev;
  std::vector<uint16_t*> host_ptrs, dev_ptrs;
  for (uint32_t l = 0; l < x.n_layers; ++l) {
    want.push_back(RandomBits(c.layer_elems, 100 + l));
    dev.push_back(std::make_unique<DeviceBuffer<uint16_t>>(want.back()));
    dev_ptrs.push_back(dev.back()->get());
  }
  for (auto& w : want) host_ptrs.push_back(w.data());
  ASSERT_TRUE(ScatterChunkHost(x, c.ids, chunk, host_ptrs).ok());
  DeviceBuffer<uint16_t> dchunk(chunk);
  ASSERT_TRUE(ScatterChunkCuda(x, c.ids, dchunk.get(), dev_ptrs, nullptr).ok());
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  for (uint32_t l = 0; l < x.n_layers; ++l) ASSERT_EQ(dev[l]->ToHost(), want[l]) << "layer " << l;
  // Gather back into a chunk of other bits: the moved tokens equal the input chunk,
  // the others keep their bits, as the host reference says.
  std::vector<uint16_t> back = RandomBits(chunk_elems, 2);
  DeviceBuffer<uint16_t> dback(back);
  std::vector<const uint16_t*> host_c(host_ptrs.begin(), host_ptrs.end()), dev_c(dev_ptrs.begin(), dev_ptrs.end());
  ASSERT_TRUE(GatherChunkHost(x, c.ids, host_c, back).ok());
  ASSERT_TRUE(GatherChunkCuda(x, c.ids, dev_c, dback.get(), nullptr).ok());
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(dback.ToHost(), back);
}

TEST(KvBlocksGpuTest, UnifiedLayoutMatchesHostReference) {
  KVSTASH_SKIP_WITHOUT_GPU();
  CheckScatterAndGather(Unified());
}

TEST(KvBlocksGpuTest, HndLayoutMatchesHostReference) {
  KVSTASH_SKIP_WITHOUT_GPU();
  CheckScatterAndGather(Hnd());
}

TEST(KvBlocksGpuTest, RefusesBadTablesBeforeLaunching) {
  KVSTASH_SKIP_WITHOUT_GPU();
  Case c = Unified();
  c.ids[5] = 40;  // of 40 blocks
  DeviceBuffer<uint16_t> chunk(1);
  std::vector<uint16_t*> layers(c.x.n_layers, chunk.get());
  EXPECT_EQ(ScatterChunkCuda(c.x, c.ids, chunk.get(), layers, nullptr).code(), Status::Code::kInvalidArgument);
  layers.pop_back();
  c.ids[5] = 4;
  EXPECT_EQ(ScatterChunkCuda(c.x, c.ids, chunk.get(), layers, nullptr).code(), Status::Code::kInvalidArgument);
}

}  // namespace
}  // namespace kvstash::gpu
