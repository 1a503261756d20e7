#include "model/forward/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

namespace kvstash::model {
namespace {

// Queries are processed in tiles of this many rows; a tile's products stop at the
// last key any of its rows may see, which skips most of the masked triangle.
constexpr int kQueryTile = 256;

}  // namespace

void CausalAttention(const AttentionShape& s, const float* q, const float* k, const float* v, float* out,
                     std::vector<float>* scratch) {
  const int T = static_cast<int>(s.tokens);
  const int past = static_cast<int>(s.past);
  const int hd = static_cast<int>(s.head_dim);
  const int ldq = static_cast<int>(s.n_heads * s.head_dim);
  const int ldkv = static_cast<int>(s.n_kv_heads * s.head_dim);
  const uint32_t group = s.n_heads / s.n_kv_heads;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  scratch->resize(static_cast<size_t>(std::min(T, kQueryTile)) * (past + T));
  float* scores = scratch->data();
  for (uint32_t h = 0; h < s.n_heads; ++h) {
    const uint32_t g = h / group;
    for (int t0 = 0; t0 < T; t0 += kQueryTile) {
      const int rows = std::min(kQueryTile, T - t0);
      const int n = past + t0 + rows;  // keys visible to the tile's last row
      const float* qt = q + static_cast<size_t>(t0) * ldq + h * hd;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, hd, scale, qt, ldq, k + g * hd, ldkv, 0.0f,
                  scores, n);
      for (int t = 0; t < rows; ++t) {
        float* row = scores + static_cast<size_t>(t) * n;
        const int valid = past + t0 + t + 1;
        float mx = row[0];
        for (int j = 1; j < valid; ++j) mx = std::max(mx, row[j]);
        double sum = 0;
        for (int j = 0; j < valid; ++j) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int j = 0; j < valid; ++j) row[j] *= inv;
        std::fill(row + valid, row + n, 0.0f);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, n, 1.0f, scores, n, v + g * hd, ldkv,
                  0.0f, out + static_cast<size_t>(t0) * ldq + h * hd, ldq);
    }
  }
}

}  // namespace kvstash::model
