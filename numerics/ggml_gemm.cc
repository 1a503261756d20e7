// Packing, path choice and dispatch of the ggml-q4_1 projections (see ggml_gemm.h).
#include "numerics/ggml_gemm.h"

#include <string>

#include "kvstash/dtype_bits.h"

namespace kvstash::model::ggml {

Status PackQ4_1(std::span<const UnpackedQ4_1> w, uint32_t rows, uint32_t blocks, PackedQ4_1* out) {
  if (rows == 0 || blocks == 0 || w.size() != static_cast<size_t>(rows) * blocks) {
    return Status::InvalidArgument("PackQ4_1: " + std::to_string(w.size()) + " blocks for " +
                                   std::to_string(rows) + " rows of " + std::to_string(blocks));
  }
  out->rows = rows;
  out->blocks = blocks;
  out->row_blocks = (rows + kRowBlock - 1) / kRowBlock;
  const size_t tiles = static_cast<size_t>(out->row_blocks) * blocks;
  out->q.assign(tiles * kPackedQuadBytes, 0);
  out->d.assign(tiles * kRowBlock, 0.0f);
  out->m.assign(tiles * kRowBlock, 0.0f);
  for (uint32_t o = 0; o < rows; ++o) {
    const uint32_t rb = o / kRowBlock, r = o % kRowBlock;
    for (uint32_t b = 0; b < blocks; ++b) {
      const UnpackedQ4_1& src = w[static_cast<size_t>(o) * blocks + b];
      const size_t tile = static_cast<size_t>(rb) * blocks + b;
      uint8_t* q = &out->q[tile * kPackedQuadBytes];
      for (uint32_t j = 0; j < kBlock; ++j) q[(j / 4) * kRowBlock * 4 + r * 4 + j % 4] = src.q[j];
      out->d[tile * kRowBlock + r] = src.d;
      out->m[tile * kRowBlock + r] = src.m;
    }
  }
  return Status::Ok();
}

Result<GgmlPath> ResolveGgmlPath(spec::GemmBackend backend) {
  KVSTASH_ASSIGN_OR_RETURN(const bool avx512, spec::UseAvx512(backend));
  KVSTASH_ASSIGN_OR_RETURN(const bool avx2, spec::UseAvx2(backend));
  return avx512 ? GgmlPath::kAvx512 : avx2 ? GgmlPath::kAvx2 : GgmlPath::kScalar;
}

const char* GgmlPathName(GgmlPath path) {
  switch (path) {
    case GgmlPath::kAvx2:
      return "avx2";
    case GgmlPath::kAvx512:
      return "avx512";
    case GgmlPath::kScalar:
      break;
  }
  return "scalar";
}

void GemmRowBlock(GgmlPath path, const PackedQ4_1& w, uint32_t row_block, const BlockQ8_1* x, const float* xd,
                  const float* xs, uint32_t tokens, float* y, size_t y_stride) {
#if defined(__x86_64__)
  if (path == GgmlPath::kAvx512) {
    internal::GemmRowBlockAvx512(w, row_block, x, xd, xs, tokens, y, y_stride);
  } else {
    internal::GemmRowBlockAvx2(w, row_block, x, xd, xs, tokens, y, y_stride);
  }
#else
  (void)path, (void)w, (void)row_block, (void)x, (void)xd, (void)xs, (void)tokens, (void)y, (void)y_stride;
#endif
}

void Q8_1Scales(const BlockQ8_1* x, size_t n, float* xd, float* xs) {
  for (size_t i = 0; i < n; ++i) {
    xd[i] = F16ToF32(x[i].d);
    xs[i] = F16ToF32(x[i].s);
  }
}

}  // namespace kvstash::model::ggml
