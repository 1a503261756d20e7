// Causal grouped-query attention over a KV cache, with BLAS matrix products.
//
// For query head h (kv head g = h / (n_heads / n_kv_heads)) and new token t at
// absolute position past + t:
//   s_j = (q_t . k_j) / sqrt(head_dim)  for j in [0, past + t]   (causal mask)
//   out_t = sum_j softmax(s)_j v_j
// Scores and the weighted sum are SGEMMs per head (all positions are computed and the
// masked ones zeroed after the softmax); the softmax runs in fp32 with the row max
// subtracted and the sum accumulated in double.
//
// Thread-safety: pure over caller buffers; parallel through the BLAS thread pool.
#pragma once

#include <cstdint>
#include <vector>

namespace kvstash::model {

struct AttentionShape {
  uint32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  uint32_t past = 0;    // cached tokens before the new ones
  uint32_t tokens = 0;  // new tokens (queries)
};

// q [tokens, n_heads, head_dim]; k, v [past + tokens, n_kv_heads, head_dim];
// out [tokens, n_heads, head_dim]. `scratch` is resized as needed.
void CausalAttention(const AttentionShape& s, const float* q, const float* k, const float* v, float* out,
                     std::vector<float>* scratch);

}  // namespace kvstash::model
