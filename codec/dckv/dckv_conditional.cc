#include "codec/dckv/dckv_conditional.h"

#include <algorithm>
#include <bit>
#include <vector>

#include "codec/dckv/dckv_axpy.h"

namespace kvstash::dckv {

void TokenEmbedding(const DckvConditioning& cond, uint32_t token, std::span<float> z) {
  const uint16_t* e = cond.embed_bf16.data() + static_cast<size_t>(token) * cond.rank;
  for (uint32_t k = 0; k < cond.rank; ++k) z[k] = std::bit_cast<float>(static_cast<uint32_t>(e[k]) << 16);
}

void PredictRows(std::span<const float> map, uint32_t inputs, uint32_t n_active, std::span<const float> u,
                 uint32_t count, std::span<float> mu) {
  const float* bias = map.data() + static_cast<size_t>(inputs) * n_active;
  for (uint32_t b = 0; b < count; ++b) std::copy_n(bias, n_active, mu.data() + static_cast<size_t>(b) * n_active);
  // Map row j is used for every row of the batch while it is in cache.
  for (uint32_t j = 0; j < inputs; ++j) {
    const float* m = map.data() + static_cast<size_t>(j) * n_active;
    for (uint32_t b = 0; b < count; ++b) {
      const float v = u[static_cast<size_t>(b) * inputs + j];
      if (v != 0.0f) Axpy(v, m, mu.data() + static_cast<size_t>(b) * n_active, n_active);
    }
  }
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
