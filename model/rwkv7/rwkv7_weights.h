// Private to model/rwkv7: the fp32 weights of an RWKV-7 model, with the tensor names
// of rwkv.cpp files they come from. Matrices are row-major [out][in] (the file's ggml
// dims {in, out}); the LoRA matrices are stored transposed by rwkv.cpp's converter, so
// that w1 is [decay_lora][C] and w2 is [C][decay_lora] here as well.
//
// Thread-safety: immutable after loading.
#pragma once

#include <vector>

#include "model/rwkv7/rwkv7_model.h"

namespace kvstash::rwkv7 {

struct Rwkv7LayerWeights {
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;  // [C]            blocks.l.ln1/ln2
  // Token-shift mixes [C] each; file: att.x_rwkvag, six rows in this order.
  std::vector<float> x_r, x_w, x_k, x_v, x_a, x_g;
  std::vector<float> w0, w1, w2;                  // [C], [Dw][C], [C][Dw]   att.w*
  std::vector<float> a0, a1, a2;                  // [C], [Da][C], [C][Da]   att.a*
  std::vector<float> v0, v1, v2;                  // empty in layer 0        att.v*
  std::vector<float> g1, g2;                      // [Dg][C], [C][Dg]        att.g*
  std::vector<float> k_k, k_a, r_k;               // [C]                     att.k_k ...
  std::vector<float> receptance, key, value, output;  // [C][C]   att.<name>.weight
  std::vector<float> ln_x_w, ln_x_b;              // [C]                     att.ln_x
  std::vector<float> ffn_x_k;                     // [C]                     ffn.x_k
  std::vector<float> ffn_key, ffn_value;          // [F][C], [C][F]          ffn.*.weight
};

struct Rwkv7Model::Weights {
  std::vector<float> emb;              // [V][C]   emb.weight
  std::vector<float> ln0_w, ln0_b;     // [C]      blocks.0.ln0
  std::vector<Rwkv7LayerWeights> layers;
  std::vector<float> ln_out_w, ln_out_b;  // [C]   ln_out
  std::vector<float> head;             // [V][C]   head.weight
};

}  // namespace kvstash::rwkv7
