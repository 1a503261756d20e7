// General-purpose lossless coders that `kvstash-bench codec --codec lossless-peers`
// (benchmarks/drivers/lossless_peers_bench.h) runs beside spec and byte-plane rANS on
// the same KV chunk bytes:
//   zstd-3, zstd-19   libzstd at that level on the raw bytes (ZSTD_compress)
//   htscodecs-o0/o1   htscodecs' rANS-Nx16 (CRAM 3.1; Bonfield, "The Scalable rANS
//                     Codecs for CRAM", 2021), order 0 or order 1, 32-way with the
//                     library's own SIMD choice (RANS_ORDER_X32 | RANS_ORDER_SIMD_AUTO),
//                     on each byte plane separately (codec/baselines/byte_plane.h
//                     SplitBytePlanes): the planes are what makes them fit float bytes.
//                     Only when the build has libhtscodecs (entropy_bench.h
//                     HtscodecsBuiltIn()).
// Packed form (ours, for the benchmark only, never stored): zstd: the zstd frame;
// htscodecs: per plane u32 size (little-endian) then htscodecs' own stream.
//
// Units: `width` is the element size in bytes (bf16/f16: 2, fp8: 1); a plane is byte p
// of every element. Errors: Internal when a library fails to encode; Corruption when a
// packed input does not decode to exactly out.size() bytes.
// Thread-safety: the coders are pure functions; call them from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kvstash/result.h"

namespace kvstash::bench {

struct PeerCoder {
  std::string name;  // "zstd-3", "zstd-19", "htscodecs-o0", "htscodecs-o1"
  std::function<Result<std::vector<uint8_t>>(std::span<const uint8_t> data, size_t width)> encode;
  // out.size() is the original byte count (the container knows it).
  std::function<Status(std::span<const uint8_t> packed, size_t width, std::span<uint8_t> out)> decode;
};

// The coders this build has, in table order: zstd-3, zstd-19, then htscodecs-o0 and
// htscodecs-o1 when built with libhtscodecs.
std::vector<PeerCoder> PeerCoders();

}  // namespace kvstash::bench
