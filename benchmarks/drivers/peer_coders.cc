#include "benchmarks/drivers/peer_coders.h"

#include <zstd.h>
#if defined(KVSTASH_HAVE_HTSCODECS)
#include <htscodecs/rANS_static4x16.h>
#endif

#include "codec/baselines/byte_plane.h"
#include "common/byte_io.h"

namespace kvstash::bench {
namespace {

PeerCoder Zstd(int level) {
  PeerCoder c;
  c.name = "zstd-" + std::to_string(level);
  c.encode = [level](std::span<const uint8_t> data, size_t) -> Result<std::vector<uint8_t>> {
    std::vector<uint8_t> packed(ZSTD_compressBound(data.size()));
    const size_t n = ZSTD_compress(packed.data(), packed.size(), data.data(), data.size(), level);
    if (ZSTD_isError(n)) return Status::Internal(std::string("zstd: ") + ZSTD_getErrorName(n));
    packed.resize(n);
    return packed;
  };
  c.decode = [](std::span<const uint8_t> packed, size_t, std::span<uint8_t> out) -> Status {
    const size_t n = ZSTD_decompress(out.data(), out.size(), packed.data(), packed.size());
    if (ZSTD_isError(n) || n != out.size()) return Status::Corruption("zstd: stream does not decode to the size");
    return Status::Ok();
  };
  return c;
}

#if defined(KVSTASH_HAVE_HTSCODECS)
PeerCoder Htscodecs(int order) {
  const int flags = order | RANS_ORDER_X32 | RANS_ORDER_SIMD_AUTO;
  PeerCoder c;
  c.name = "htscodecs-o" + std::to_string(order);
  c.encode = [flags](std::span<const uint8_t> data, size_t width) -> Result<std::vector<uint8_t>> {
    std::vector<uint8_t> planes = baselines::SplitBytePlanes(data, width);
    const auto n = static_cast<unsigned int>(data.size() / width);
    std::vector<uint8_t> packed;
    ByteWriter w(&packed);
    std::vector<uint8_t> stream(rans_compress_bound_4x16(n, flags));
    for (size_t p = 0; p < width; ++p) {
      auto size = static_cast<unsigned int>(stream.size());
      if (rans_compress_to_4x16(planes.data() + p * n, n, stream.data(), &size, flags) == nullptr) {
        return Status::Internal("htscodecs: rans_compress_to_4x16 failed");
      }
      w.U32(size);
      w.Bytes(std::span<const uint8_t>(stream.data(), size));
    }
    return packed;
  };
  c.decode = [](std::span<const uint8_t> packed, size_t width, std::span<uint8_t> out) -> Status {
    const auto n = static_cast<unsigned int>(out.size() / width);
    std::vector<uint8_t> planes(out.size());
    ByteReader r(packed);
    for (size_t p = 0; p < width; ++p) {
      uint32_t size = 0;
      std::span<const uint8_t> stream;
      if (!r.U32(&size) || !r.Take(size, &stream)) return Status::Corruption("htscodecs: truncated plane");
      unsigned int got = n;
      // htscodecs takes a non-const input pointer but only reads it.
      auto* in = const_cast<uint8_t*>(stream.data());
      if (rans_uncompress_to_4x16(in, size, planes.data() + p * n, &got) == nullptr || got != n) {
        return Status::Corruption("htscodecs: plane does not decode to the size");
      }
    }
    if (r.remaining() != 0) return Status::Corruption("htscodecs: trailing bytes");
    baselines::MergeBytePlanes(planes, width, out);
    return Status::Ok();
  };
  return c;
}
#endif

}  // namespace

std::vector<PeerCoder> PeerCoders() {
  std::vector<PeerCoder> out = {Zstd(3), Zstd(19)};
#if defined(KVSTASH_HAVE_HTSCODECS)
  out.push_back(Htscodecs(0));
  out.push_back(Htscodecs(1));
#endif
  return out;
}

}  // namespace kvstash::bench
