// Rotary position embedding for the dckv codec: the runtime's RoPE (model/ops.h,
// Hugging Face rotate_half layout) re-implemented here so that kvstash_codec does not
// depend on kvstash_model; tests/dckv checks both give bit-identical results.
//
//   inv_freq_i = fp32(1 / theta^(2i/d)), angle = fp32(position) * inv_freq_i (fp32),
//   cos/sin evaluated in double and rounded to fp32,
//   x'_i = x_i cos - x_{i+d/2} sin,  x'_{i+d/2} = x_{i+d/2} cos + x_i sin.
// The inverse rotation (sin negated) recovers K before RoPE from cached K; it is exact
// up to fp32 rounding (the rotation is orthogonal).
//
// Thread-safety: pure functions over caller buffers.
#pragma once

#include <cstdint>

namespace kvstash::dckv {

// Rotates one head row x[head_dim] in place for `position`. `inverse` undoes the
// rotation. REQUIRES: head_dim even, theta > 0.
void RotateHead(float* x, uint32_t head_dim, uint32_t position, float theta, bool inverse);

}  // namespace kvstash::dckv
