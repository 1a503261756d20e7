#include "codec/dckv/dckv_conditional.h"

#include <algorithm>
#include <bit>
#include <vector>

namespace kvstash::dckv {
namespace {

// acc[i] += u * row[i] for every i (each acc[i] sees its terms in the caller's order).
void Axpy(float u, const float* row, std::span<float> acc) {
  for (size_t i = 0; i < acc.size(); ++i) acc[i] += u * row[i];
}

}  // namespace

void TokenEmbedding(const DckvConditioning& cond, uint32_t token, std::span<float> z) {
  const uint16_t* e = cond.embed_bf16.data() + static_cast<size_t>(token) * cond.rank;
  for (uint32_t k = 0; k < cond.rank; ++k) z[k] = std::bit_cast<float>(static_cast<uint32_t>(e[k]) << 16);
}

void PredictTokenMean(const DckvGroup& g, uint32_t rank, std::span<const float> z, std::span<float> mu) {
  const uint32_t a = g.n_active();
  std::copy_n(g.token_map.data() + static_cast<size_t>(rank) * a, a, mu.begin());
  for (uint32_t k = 0; k < rank; ++k) {
    if (z[k] != 0.0f) Axpy(z[k], g.token_map.data() + static_cast<size_t>(k) * a, mu);
  }
}

void PredictContextMean(const DckvGroup& g, uint32_t rank, std::span<const float> prev,
                        std::span<const float> next, std::span<const float> z, std::span<float> mu) {
  const uint32_t a = g.n_active();
  const float* m = g.context_map.data();
  const uint32_t in = g.context_inputs;
  std::copy_n(m + static_cast<size_t>(in + rank) * a, a, mu.begin());
  for (uint32_t k = 0; k < in; ++k) {
    const float n = next.empty() ? prev[k] : 0.5f * (prev[k] + next[k]);
    if (n != 0.0f) Axpy(n, m + static_cast<size_t>(k) * a, mu);
  }
  for (uint32_t k = 0; k < rank; ++k) {
    if (z[k] != 0.0f) Axpy(z[k], m + static_cast<size_t>(in + k) * a, mu);
  }
}

}  // namespace kvstash::dckv
