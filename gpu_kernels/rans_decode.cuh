// CUDA rANS segment decoder kernel (host API: rans_decode.h).
//
// One warp decodes one segment; lane j owns rANS state j. Per group of 32 symbols:
// every active lane decodes its symbol, the lanes whose state fell below 2^16 read the
// next words in ascending lane order (ballot + prefix popcount gives each lane its word
// index), then the escaped lanes do their raw-value step and refill the same way.
// This is exactly the CPU reference's word order (codec/entropy/rans_format.h).
// The word cursor is warp-uniform, so every bounds check is uniform and a corrupt
// segment stops the warp without reading past its end.
#pragma once

#include <cstdint>

#include "codec/entropy/rans_format.h"
#include "gpu_kernels/rans_decode.h"

namespace kvstash::gpu::internal {

constexpr unsigned kFullMask = 0xFFFFFFFFu;

struct RansKernelParams {
  RansDeviceTablesView tables;
  RansSegmentsLaunch launch;
};

__device__ inline uint32_t LoadU16(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8;
}

// kShared: copy the decoder arrays of all tables to shared memory first.
template <typename OutT, bool kShared>
__global__ void RansDecodeSegmentsKernel(RansKernelParams p, OutT* __restrict__ out) {
  using namespace kvstash::entropy;
  extern __shared__ uint32_t smem[];
  const uint32_t num_slots = p.tables.num_tables << p.tables.precision;
  const uint32_t* entries = p.tables.entries;
  const uint16_t* symbols = p.tables.symbols;
  if constexpr (kShared) {
    uint16_t* sym_smem = reinterpret_cast<uint16_t*>(smem + num_slots);
    for (uint32_t i = threadIdx.x; i < num_slots; i += blockDim.x) {
      smem[i] = entries[i];
      sym_smem[i] = symbols[i];
    }
    __syncthreads();
    entries = smem;
    symbols = sym_smem;
  }
  const uint32_t lane = threadIdx.x & 31u;
  const uint64_t segment = static_cast<uint64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (segment >= p.launch.num_segments) return;

  const uint64_t begin = p.launch.offsets[segment];
  const uint64_t size = p.launch.offsets[segment + 1] - begin;
  const uint8_t* seg = p.launch.framed + begin;
  RansSegmentStatus status = RansSegmentStatus::kOk;
  if (size < static_cast<uint64_t>(kRansHeaderBytes) || size % 2 != 0) {
    if (lane == 0) p.launch.status[segment] = static_cast<uint8_t>(RansSegmentStatus::kBadSegmentSize);
    return;
  }
  uint32_t x = LoadU16(seg + 4 * lane) | LoadU16(seg + 4 * lane + 2) << 16;
  if (__any_sync(kFullMask, x < kRansStateLow)) {
    if (lane == 0) p.launch.status[segment] = static_cast<uint8_t>(RansSegmentStatus::kBadInitialState);
    return;
  }
  const uint8_t* words = seg + kRansHeaderBytes;
  const uint64_t num_words = (size - kRansHeaderBytes) / 2;
  uint64_t pos = 0;
  const int precision = p.tables.precision;
  const uint32_t slot_mask = (1u << precision) - 1u;
  const int k = p.tables.symbol_bits;
  const uint32_t value_mask = (1u << k) - 1u;
  const uint64_t first_symbol = segment * p.launch.segment_symbols;
  const uint64_t remaining = p.launch.num_symbols - first_symbol;
  const uint32_t seg_n = remaining < p.launch.segment_symbols ? static_cast<uint32_t>(remaining)
                                                               : p.launch.segment_symbols;
  const uint32_t lanes_below = (1u << lane) - 1u;

  for (uint32_t g = 0; g < seg_n; g += 32) {
    const bool active = g + lane < seg_n;
    const uint64_t i = first_symbol + g + lane;
    uint32_t t = 0;
    if (active && p.launch.table_index != nullptr) t = p.launch.table_index[i];
    if (__any_sync(kFullMask, t >= p.tables.num_tables)) {
      status = RansSegmentStatus::kBadTableIndex;
      break;
    }
    uint32_t sym = 0;
    bool escape = false;
    bool renorm = false;
    if (active) {
      const uint32_t slot = t << precision | (x & slot_mask);
      const uint32_t e = entries[slot];
      sym = symbols[slot];
      escape = (e & kSlotEscapeBit) != 0;
      x = (e & kSlotFreqMask) * (x >> precision) + (e >> kSlotBiasShift & kSlotBiasMask);
      renorm = x < kRansStateLow;
    }
    uint32_t ballot = __ballot_sync(kFullMask, renorm);
    if (pos + __popc(ballot) > num_words) {
      status = RansSegmentStatus::kTruncated;
      break;
    }
    if (renorm) x = x << 16 | LoadU16(words + 2 * (pos + __popc(ballot & lanes_below)));
    pos += __popc(ballot);

    if (__any_sync(kFullMask, escape)) {
      renorm = false;
      if (escape) {
        sym = x & value_mask;
        x >>= k;
        renorm = x < kRansStateLow;
      }
      ballot = __ballot_sync(kFullMask, renorm);
      if (pos + __popc(ballot) > num_words) {
        status = RansSegmentStatus::kTruncated;
        break;
      }
      if (renorm) x = x << 16 | LoadU16(words + 2 * (pos + __popc(ballot & lanes_below)));
      pos += __popc(ballot);
      bool in_range = false;
      if (escape) {
        const uint32_t first = p.tables.ranges[2 * t];
        const uint32_t n = p.tables.ranges[2 * t + 1];
        in_range = ((sym - first) & value_mask) < n;
      }
      if (__any_sync(kFullMask, in_range)) {
        status = RansSegmentStatus::kEscapeInRange;
        break;
      }
    }
    if (active) out[i] = static_cast<OutT>(sym);
  }
  if (status == RansSegmentStatus::kOk && pos != num_words) status = RansSegmentStatus::kTrailingWords;
  if (status == RansSegmentStatus::kOk && __any_sync(kFullMask, x != kRansStateLow)) {
    status = RansSegmentStatus::kFinalStateMismatch;
  }
  if (lane == 0) p.launch.status[segment] = static_cast<uint8_t>(status);
}

}  // namespace kvstash::gpu::internal
