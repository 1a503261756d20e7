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

namespace {

Result<StatePartSize> MeasurePart(std::string name, uint64_t tensors,
                                  std::span<const uint8_t> bytes, int zstd_level) {
  StatePartSize p;
  p.part = std::move(name);
  p.tensors = tensors;
  p.raw_bytes = bytes.size();
  p.scalars = bytes.size() / 4;
  KVSTASH_ASSIGN_OR_RETURN(p.zstd_bytes, ZstdCompressedBytes(bytes, zstd_level));
  KVSTASH_ASSIGN_OR_RETURN(std::vector<uint8_t> shuffled, ShuffleBytePlanes(bytes));
  KVSTASH_ASSIGN_OR_RETURN(p.zstd_shuffled_bytes, ZstdCompressedBytes(shuffled, zstd_level));
  KVSTASH_ASSIGN_OR_RETURN(p.byteplane_bytes, BytePlaneEntropyBytes(bytes));
  return p;
}

}  // namespace

Result<std::vector<StatePartSize>> MeasureStateParts(const RecurrentState& state, int zstd_level) {
  std::vector<std::string> order;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<uint64_t> counts;
  std::vector<uint8_t> all;
  for (const StateTensor& t : state.tensors) {
    KVSTASH_RETURN_IF_ERROR(t.Validate());
    if (t.dtype != DType::kF32) {
      return Status::InvalidArgument("state size: tensor " + t.name + " is not f32");
    }
    const size_t dot = t.name.rfind('.');
    const std::string part = dot == std::string::npos ? t.name : t.name.substr(dot + 1);
    size_t i = std::find(order.begin(), order.end(), part) - order.begin();
    if (i == order.size()) {
      order.push_back(part);
      bytes.emplace_back();
      counts.push_back(0);
    }
    bytes[i].insert(bytes[i].end(), t.data.begin(), t.data.end());
    counts[i] += 1;
    all.insert(all.end(), t.data.begin(), t.data.end());
  }
  std::vector<StatePartSize> rows;
  double byteplane_sum = 0.0;
  for (size_t i = 0; i < order.size(); ++i) {
    KVSTASH_ASSIGN_OR_RETURN(StatePartSize p, MeasurePart(order[i], counts[i], bytes[i], zstd_level));
    byteplane_sum += p.byteplane_bytes;
    rows.push_back(std::move(p));
  }
  KVSTASH_ASSIGN_OR_RETURN(StatePartSize total,
                           MeasurePart("all", state.tensors.size(), all, zstd_level));
  total.byteplane_bytes = byteplane_sum;
  rows.push_back(std::move(total));
  return rows;
}

}  // namespace kvstash::rwkv7
