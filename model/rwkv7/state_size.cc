#include "model/rwkv7/state_size.h"

#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace kvstash::rwkv7 {
namespace {

Status CheckFp32Size(std::span<const uint8_t> bytes) {
  if (bytes.size() % 4 != 0) {
    return Status::InvalidArgument("state size: " + std::to_string(bytes.size()) +
                                   " bytes is not a whole number of fp32 values");
  }
  return Status::Ok();
}

}  // namespace

Result<std::array<double, 4>> BytePlaneEntropyBits(std::span<const uint8_t> fp32_bytes) {
  KVSTASH_RETURN_IF_ERROR(CheckFp32Size(fp32_bytes));
  std::array<double, 4> bits{};
  const size_t n = fp32_bytes.size() / 4;
  if (n == 0) return bits;
  for (size_t p = 0; p < 4; ++p) {
    std::array<uint64_t, 256> counts{};
    for (size_t i = 0; i < n; ++i) ++counts[fp32_bytes[4 * i + p]];
    double h = 0.0;
    for (uint64_t c : counts) {
      if (c == 0) continue;
      const double q = static_cast<double>(c) / static_cast<double>(n);
      h -= q * std::log2(q);
    }
    bits[p] = h;
  }
  return bits;
}

Result<double> BytePlaneEntropyBytes(std::span<const uint8_t> fp32_bytes) {
  using PlaneBits = std::array<double, 4>;
  KVSTASH_ASSIGN_OR_RETURN(PlaneBits bits, BytePlaneEntropyBits(fp32_bytes));
  const double n = static_cast<double>(fp32_bytes.size() / 4);
  return n * (bits[0] + bits[1] + bits[2] + bits[3]) / 8.0;
}

Result<std::vector<uint8_t>> ShuffleBytePlanes(std::span<const uint8_t> fp32_bytes) {
  KVSTASH_RETURN_IF_ERROR(CheckFp32Size(fp32_bytes));
  const size_t n = fp32_bytes.size() / 4;
  std::vector<uint8_t> out(fp32_bytes.size());
  for (size_t i = 0; i < n; ++i) {
    for (size_t p = 0; p < 4; ++p) out[p * n + i] = fp32_bytes[4 * i + p];
  }
  return out;
}

Result<uint64_t> ZstdCompressedBytes(std::span<const uint8_t> bytes, int level) {
  if (level < 1 || level > ZSTD_maxCLevel()) {
    return Status::InvalidArgument("zstd level " + std::to_string(level) + " out of range");
  }
  std::vector<uint8_t> packed(ZSTD_compressBound(bytes.size()));
  const size_t n = ZSTD_compress(packed.data(), packed.size(), bytes.data(), bytes.size(), level);
  if (ZSTD_isError(n)) return Status::Internal(std::string("zstd: ") + ZSTD_getErrorName(n));
  std::vector<uint8_t> back(bytes.size());
  const size_t m = ZSTD_decompress(back.data(), back.size(), packed.data(), n);
  if (ZSTD_isError(m) || m != bytes.size() ||
      !std::equal(back.begin(), back.end(), bytes.begin())) {
    return Status::Internal("zstd: round trip differs");
  }
  return static_cast<uint64_t>(n);
}

}  // namespace kvstash::rwkv7
