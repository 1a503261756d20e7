// CUDA rANS decoder for segmented streams (codec/entropy/rans_segments.h): one warp
// per segment, lane j of the warp = rANS lane j, frequency tables in shared memory
// when they fit. Output is bit-identical to the CPU reference (codec/entropy/rans.h);
// tests/gpu_kernels/rans_gpu_test.cc compares.
//
// Host API only (no device syntax). Entry points take caller-owned device memory and
// a cudaStream_t; they neither allocate nor synchronise, except
// DeviceRansTables::Upload, which allocates the device copy of a TableSet (once per
// codec artifact) and synchronises its stream.
//
// Errors: a launch/configuration failure is returned as Status (Internal for CUDA
// errors, InvalidArgument for bad arguments). Corrupt stream bytes are reported per
// segment in d_status (RansSegmentStatus, one byte per segment) after the stream
// completes; RansSegmentStatusToStatus turns a copied-back array into a Status.
//
// Thread-safety: DeviceRansTables is immutable after Upload and may be shared by
// concurrent launches; the decode call itself is reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "codec/entropy/table_set.h"
#include "kvstash/result.h"

namespace kvstash::gpu {

// Per-segment outcome written by the kernel (one byte per segment).
enum class RansSegmentStatus : uint8_t {
  kOk = 0,
  kBadSegmentSize = 1,     // shorter than the 128-byte header or odd
  kBadInitialState = 2,    // a header state below 2^16
  kTruncated = 3,          // ran out of words
  kTrailingWords = 4,      // words left after the last symbol
  kFinalStateMismatch = 5, // a state other than 2^16 at the end
  kEscapeInRange = 6,      // an escaped value inside its table's direct range
  kBadTableIndex = 7,      // a table index >= num_tables (caller bug)
};

// Non-owning view of a TableSet in device memory (layout as TableSet's arrays).
struct RansDeviceTablesView {
  const uint32_t* entries = nullptr;  // [num_tables << precision]
  const uint16_t* symbols = nullptr;  // [num_tables << precision]
  const uint32_t* ranges = nullptr;   // [2 * num_tables]: first_symbol, num_direct
  uint32_t num_tables = 0;
  int precision = 0;
  int symbol_bits = 0;
};

// Owning device copy of a TableSet.
class DeviceRansTables {
 public:
  // Allocates and copies; Internal on a CUDA error.
  static Result<DeviceRansTables> Upload(const entropy::TableSet& tables, cudaStream_t stream);
  DeviceRansTables(DeviceRansTables&& other) noexcept;
  DeviceRansTables& operator=(DeviceRansTables&& other) noexcept;
  DeviceRansTables(const DeviceRansTables&) = delete;
  DeviceRansTables& operator=(const DeviceRansTables&) = delete;
  ~DeviceRansTables();
  const RansDeviceTablesView& view() const { return view_; }

 private:
  DeviceRansTables() = default;
  void Release();
  void* memory_ = nullptr;
  RansDeviceTablesView view_;
};

// Arguments of one decode launch; every pointer is device memory.
struct RansSegmentsLaunch {
  const uint8_t* framed = nullptr;      // the segmented stream (all of it)
  const uint64_t* offsets = nullptr;    // [num_segments + 1] from ParseSegmentDirectory
  uint32_t num_segments = 0;
  uint32_t segment_symbols = 0;         // multiple of 32
  uint64_t num_symbols = 0;
  const uint16_t* table_index = nullptr;  // [num_symbols], or nullptr = table 0
  uint8_t* status = nullptr;            // [num_segments] RansSegmentStatus
};

// Decodes into d_out[num_symbols] (u16 symbols, or u8 when symbol_bits <= 8).
// Table indices >= num_tables are caught per segment (kBadTableIndex) rather than
// read out of bounds. InvalidArgument for an 8-bit output with symbol_bits > 8 or a bad
// segment length; Internal when the launch fails.
Status RansDecodeSegmentsCuda(const RansDeviceTablesView& tables, const RansSegmentsLaunch& launch,
                              uint16_t* d_out, cudaStream_t stream);
Status RansDecodeSegmentsCuda(const RansDeviceTablesView& tables, const RansSegmentsLaunch& launch,
                              uint8_t* d_out, cudaStream_t stream);

// Ok when every segment decoded, else Corruption naming the first bad segment.
Status RansSegmentStatusToStatus(std::span<const uint8_t> status);

}  // namespace kvstash::gpu
