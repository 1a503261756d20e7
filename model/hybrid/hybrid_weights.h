// fp32 weights of a hybrid model (private to model/hybrid). Matrices are row-major
// nn.Linear weights [out, in]; names in comments are the checkpoint's, relative to
// the layer prefix "model.layers.<l>." (or "model.language_model.layers.<l>.").
#pragma once

#include <vector>

#include "model/hybrid/hybrid_model.h"

namespace kvstash::hybrid {

struct LinearAttnWeights {
  std::vector<float> in_proj_qkv;  // linear_attn.in_proj_qkv.weight [conv_dim, D]
  std::vector<float> in_proj_z;    // linear_attn.in_proj_z.weight [value_dim, D]
  std::vector<float> in_proj_b;    // linear_attn.in_proj_b.weight [num_v_heads, D]
  std::vector<float> in_proj_a;    // linear_attn.in_proj_a.weight [num_v_heads, D]
  std::vector<float> conv;         // linear_attn.conv1d.weight [conv_dim, 1, kernel]
  std::vector<float> dt_bias;      // linear_attn.dt_bias [num_v_heads]
  std::vector<float> neg_a;        // -exp(A_log) (linear_attn.A_log [num_v_heads])
  std::vector<float> norm;         // linear_attn.norm.weight [head_v_dim] (plain weight)
  std::vector<float> out_proj;     // linear_attn.out_proj.weight [D, value_dim]
};

struct AttnWeights {
  std::vector<float> q_proj;  // self_attn.q_proj.weight [heads * head_dim * 2, D]
  std::vector<float> k_proj;  // self_attn.k_proj.weight [kv_heads * head_dim, D]
  std::vector<float> v_proj;  // self_attn.v_proj.weight [kv_heads * head_dim, D]
  std::vector<float> o_proj;  // self_attn.o_proj.weight [D, heads * head_dim]
  std::vector<float> q_norm;  // self_attn.q_norm.weight [head_dim] (zero-centred)
  std::vector<float> k_norm;  // self_attn.k_norm.weight [head_dim] (zero-centred)
};

struct LayerWeights {
  std::vector<float> input_norm;  // input_layernorm.weight [D]
  std::vector<float> post_norm;   // post_attention_layernorm.weight [D]
  LinearAttnWeights linear;       // linear_attention layers
  AttnWeights attn;               // full_attention layers
  std::vector<float> gate_proj;   // mlp.gate_proj.weight [I, D]
  std::vector<float> up_proj;     // mlp.up_proj.weight [I, D]
  std::vector<float> down_proj;   // mlp.down_proj.weight [D, I]
};

struct HybridModel::Weights {
  std::vector<float> embed;     // embed_tokens.weight [vocab, D]
  std::vector<float> lm_head;   // lm_head.weight [vocab, D] (= embed when tied)
  std::vector<float> norm;      // norm.weight [D]
  std::vector<float> inv_freq;  // RoPE inverse frequencies [rotary_dim / 2]
  std::vector<LayerWeights> layers;
};

}  // namespace kvstash::hybrid
