// Shape of an RWKV-7 model, as read from its weights (model/rwkv7/rwkv7_model.h).
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>

namespace kvstash::rwkv7 {

struct Rwkv7Config {
  uint32_t n_vocab = 0;     // tokens (256 for the byte-level tiny models)
  uint32_t n_embd = 0;      // C, channels of the residual stream
  uint32_t n_layer = 0;     // blocks
  uint32_t n_head = 0;      // H; n_head * head_size == n_embd
  uint32_t head_size = 0;   // N, channels per head (64 in every released RWKV-7)
  uint32_t ffn_dim = 0;     // hidden width of the channel mix (4 * C in released models)
  uint32_t decay_lora = 0;  // rank of the w (decay) LoRA
  uint32_t iclr_lora = 0;   // rank of the a (in-context learning rate) LoRA
  uint32_t value_lora = 0;  // rank of the v-first mixing LoRA (layers >= 1)
  uint32_t gate_lora = 0;   // rank of the g (output gate) LoRA

  // fp32 scalars of the recurrent state: per layer two shift vectors of C plus H
  // matrices of N x N.
  uint64_t StateScalars() const {
    return uint64_t{n_layer} * (2ull * n_embd + uint64_t{n_head} * head_size * head_size);
  }
  bool operator==(const Rwkv7Config&) const = default;
};

}  // namespace kvstash::rwkv7
