#include "codec/dckv/dckv_conditional.h"

#include <algorithm>
#include <bit>
#include <vector>

#include "codec/dckv/dckv_predict_rows_internal.h"

namespace kvstash::dckv {

void TokenEmbedding(const DckvConditioning& cond, uint32_t token, std::span<float> z) {
  const uint16_t* e = cond.embed_bf16.data() + static_cast<size_t>(token) * cond.rank;
  for (uint32_t k = 0; k < cond.rank; ++k) z[k] = std::bit_cast<float>(static_cast<uint32_t>(e[k]) << 16);
}

namespace internal {

void PredictRowsPortableColumns(const float* map, uint32_t inputs, uint32_t n_active, const float* u,
                                uint32_t count, uint32_t first_column, float* mu) {
  const float* bias = map + static_cast<size_t>(inputs) * n_active;
  for (uint32_t b = 0; b < count; ++b) {
    float* mb = mu + static_cast<size_t>(b) * n_active;
    std::copy(bias + first_column, bias + n_active, mb + first_column);
    for (uint32_t j = 0; j < inputs; ++j) {
      const float v = u[static_cast<size_t>(b) * inputs + j];
      if (v == 0.0f) continue;
      const float* m = map + static_cast<size_t>(j) * n_active;
      for (uint32_t i = first_column; i < n_active; ++i) mb[i] += v * m[i];
    }
  }
}

void PredictRowsPortable(const float* map, uint32_t inputs, uint32_t n_active, const float* u, uint32_t count,
                         float* mu) {
  PredictRowsPortableColumns(map, inputs, n_active, u, count, 0, mu);
}

}  // namespace internal

void PredictRows(std::span<const float> map, uint32_t inputs, uint32_t n_active, std::span<const float> u,
                 uint32_t count, std::span<float> mu, SynthesisPath path) {
#if defined(__x86_64__)
  if (path != SynthesisPath::kPortable && path != SynthesisPath::kAvx2 && SynthesisHasAvx512()) {
    return internal::PredictRowsAvx512(map.data(), inputs, n_active, u.data(), count, mu.data());
  }
  if (path != SynthesisPath::kPortable && SynthesisHasAvx2()) {
    return internal::PredictRowsAvx2(map.data(), inputs, n_active, u.data(), count, mu.data());
  }
#endif
  internal::PredictRowsPortable(map.data(), inputs, n_active, u.data(), count, mu.data());
}

void PredictTokenMean(const DckvGroup& g, uint32_t rank, std::span<const float> z, std::span<float> mu) {
  PredictRows(g.token_map, rank, g.n_active(), z.first(rank), 1, mu);
}

void PredictContextMean(const DckvGroup& g, uint32_t rank, std::span<const float> prev,
                        std::span<const float> next, std::span<const float> z, std::span<float> mu) {
  const uint32_t in = g.context_inputs;
  std::vector<float> u(in + rank);
  for (uint32_t k = 0; k < in; ++k) u[k] = next.empty() ? prev[k] : 0.5f * (prev[k] + next[k]);
  std::copy_n(z.begin(), rank, u.begin() + in);
  PredictRows(g.context_map, in + rank, g.n_active(), u, 1, mu);
}

}  // namespace kvstash::dckv
