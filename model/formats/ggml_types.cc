#include "model/formats/ggml_types.h"

#include <string>

#include "common/byte_io.h"
#include "kvstash/dtype_bits.h"

namespace kvstash::model {
namespace {

float Half(const uint8_t* p) { return F16ToF32(LoadLe<uint16_t>(p)); }

void DequantQ8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void DequantQ4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void DequantQ4_1(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float m = Half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// ggml's dequantize_row_q5_0 / q5_1: 5-bit quants, low nibbles in qs, fifth bits in qh.
void DequantQ5_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  const uint32_t qh = LoadLe<uint32_t>(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const uint8_t xh_0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
    const uint8_t xh_1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
    const int32_t x0 = ((qs[j] & 0x0F) | xh_0) - 16;
    const int32_t x1 = ((qs[j] >> 4) | xh_1) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

void DequantQ5_1(const uint8_t* b, float* y) {
  const float d = Half(b);
  const float m = Half(b + 2);
  const uint32_t qh = LoadLe<uint32_t>(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const uint8_t xh_0 = static_cast<uint8_t>(((qh >> j) << 4) & 0x10);
    const uint8_t xh_1 = static_cast<uint8_t>((qh >> (j + 12)) & 0x10);
    const int x0 = (qs[j] & 0x0F) | xh_0;
    const int x1 = (qs[j] >> 4) | xh_1;
    y[j] = static_cast<float>(x0) * d + m;
    y[j + 16] = static_cast<float>(x1) * d + m;
  }
}

// ggml's get_scale_min_k4: 6-bit scale and min of sub-block j from the 12 packed bytes.
void ScaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Scales and mins of sub-blocks is and is + 1 of a Q4_K / Q5_K block (f16 d and dmin at
// bytes 0-3, the packed 6-bit scales and mins at 4-15), as ggml computes them.
struct SubBlockPair {
  float d1, m1, d2, m2;
};
SubBlockPair ScalesK(const uint8_t* b, int is) {
  const float d = Half(b);
  const float dmin = Half(b + 2);
  uint8_t sc, m;
  ScaleMinK4(is, b + 4, &sc, &m);
  SubBlockPair p{d * sc, dmin * m, 0, 0};
  ScaleMinK4(is + 1, b + 4, &sc, &m);
  p.d2 = d * sc;
  p.m2 = dmin * m;
  return p;
}

void DequantQ4_K(const uint8_t* b, float* y) {
  const uint8_t* q = b + 16;
  for (int is = 0; is < 8; is += 2, q += 32) {
    const SubBlockPair s = ScalesK(b, is);
    for (int l = 0; l < 32; ++l) *y++ = s.d1 * static_cast<float>(q[l] & 0x0F) - s.m1;
    for (int l = 0; l < 32; ++l) *y++ = s.d2 * static_cast<float>(q[l] >> 4) - s.m2;
  }
}

// ggml's dequantize_row_q5_K.
void DequantQ5_K(const uint8_t* b, float* y) {
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int is = 0; is < 8; is += 2, ql += 32) {
    const SubBlockPair s = ScalesK(b, is);
    for (int l = 0; l < 32; ++l)
      *y++ = s.d1 * static_cast<float>((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - s.m1;
    for (int l = 0; l < 32; ++l)
      *y++ = s.d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - s.m2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

void DequantQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

bool IsSupportedGgmlType(uint32_t raw) {
  switch (static_cast<GgmlType>(raw)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kBF16:
      return true;
  }
  return false;
}

std::string_view GgmlTypeName(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ4_1: return "Q4_1";
    case GgmlType::kQ5_0:
      return "Q5_0";
    case GgmlType::kQ5_1:
      return "Q5_1";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ4_K: return "Q4_K";
    case GgmlType::kQ5_K:
      return "Q5_K";
    case GgmlType::kQ6_K: return "Q6_K";
    case GgmlType::kBF16: return "BF16";
  }
  return "unknown";
}

uint32_t BlockElems(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16: return 1;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0: return 32;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return 256;
  }
  return 0;
}

uint32_t BlockBytes(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 4;
    case GgmlType::kF16:
    case GgmlType::kBF16: return 2;
    case GgmlType::kQ4_0: return 18;
    case GgmlType::kQ4_1: return 20;
    case GgmlType::kQ5_0:
      return 22;
    case GgmlType::kQ5_1:
      return 24;
    case GgmlType::kQ8_0: return 34;
    case GgmlType::kQ4_K: return 144;
    case GgmlType::kQ5_K:
      return 176;
    case GgmlType::kQ6_K: return 210;
  }
  return 0;
}

Result<uint64_t> RowBytes(GgmlType t, uint64_t n) {
  const uint32_t be = BlockElems(t);
  if (be == 0) return Status::InvalidArgument("unsupported ggml type");
  if (n % be != 0) {
    return Status::InvalidArgument(std::to_string(n) + " elements is not a multiple of the " +
                                   std::string(GgmlTypeName(t)) + " block size " +
                                   std::to_string(be));
  }
  return n / be * BlockBytes(t);
}

Status Dequantize(GgmlType t, std::span<const uint8_t> in, std::span<float> out) {
  KVSTASH_ASSIGN_OR_RETURN(const uint64_t want, RowBytes(t, out.size()));
  if (in.size() != want) {
    return Status::InvalidArgument("dequantize " + std::string(GgmlTypeName(t)) + ": " +
                                   std::to_string(in.size()) + " bytes for " +
                                   std::to_string(out.size()) + " elements, want " +
                                   std::to_string(want));
  }
  const uint8_t* p = in.data();
  float* y = out.data();
  const size_t n = out.size();
  switch (t) {
    case GgmlType::kF32:
      for (size_t i = 0; i < n; ++i) y[i] = FromBits(LoadLe<uint32_t>(p + 4 * i));
      return Status::Ok();
    case GgmlType::kF16:
      for (size_t i = 0; i < n; ++i) y[i] = F16ToF32(LoadLe<uint16_t>(p + 2 * i));
      return Status::Ok();
    case GgmlType::kBF16:
      for (size_t i = 0; i < n; ++i) y[i] = Bf16ToF32(LoadLe<uint16_t>(p + 2 * i));
      return Status::Ok();
    default:
      break;
  }
  const uint32_t be = BlockElems(t), bb = BlockBytes(t);
  for (size_t b = 0; b < n / be; ++b, p += bb, y += be) {
    switch (t) {
      case GgmlType::kQ4_0: DequantQ4_0(p, y); break;
      case GgmlType::kQ4_1: DequantQ4_1(p, y); break;
      case GgmlType::kQ5_0:
        DequantQ5_0(p, y);
        break;
      case GgmlType::kQ5_1:
        DequantQ5_1(p, y);
        break;
      case GgmlType::kQ8_0: DequantQ8_0(p, y); break;
      case GgmlType::kQ4_K: DequantQ4_K(p, y); break;
      case GgmlType::kQ5_K:
        DequantQ5_K(p, y);
        break;
      case GgmlType::kQ6_K: DequantQ6_K(p, y); break;
      default: return Status::Internal("unreachable ggml type");
    }
  }
  return Status::Ok();
}

}  // namespace kvstash::model
