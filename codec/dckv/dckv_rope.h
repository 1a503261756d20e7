// Rotary position embedding for the dckv codec: the runtime's RoPE (model/forward/ops.h,
// Hugging Face rotate_half layout) re-implemented here so that kvstash_codec does not
// depend on kvstash_model; tests/codec/dckv checks both give bit-identical results.
//
//   inv_freq_i = fp32(1 / theta^(2i/d)), angle = fp32(position) * inv_freq_i (fp32),
//   cos/sin evaluated in double and rounded to fp32,
//   x'_i = x_i cos - x_{i+d/2} sin,  x'_{i+d/2} = x_{i+d/2} cos + x_i sin.
// The inverse rotation (sin negated) recovers K before RoPE from cached K; it is exact
// up to fp32 rounding (the rotation is orthogonal).
//
// RopeTable holds the cos/sin of a range of positions, computed exactly as above, so
// that rotating many rows costs no transcendental calls; its Rotate is bit-identical
// to RotateHead (tested).
//
// Thread-safety: pure functions over caller buffers; a RopeTable is immutable.
#pragma once

#include <cstdint>
#include <vector>

namespace kvstash::dckv {

// Rotates one head row x[head_dim] in place for `position`. `inverse` undoes the
// rotation. REQUIRES: head_dim even, theta > 0.
void RotateHead(float* x, uint32_t head_dim, uint32_t position, float theta, bool inverse);

// cos/sin of positions [first_position, first_position + count) for one head_dim and
// theta. Memory: count * head_dim floats.
class RopeTable {
 public:
  // REQUIRES: head_dim even, theta > 0.
  RopeTable(uint32_t head_dim, float theta, uint32_t first_position, uint32_t count);
  // RotateHead(x, head_dim, position, theta, inverse) for a position of the table.
  // REQUIRES first_position <= position < first_position + count.
  void Rotate(float* x, uint32_t position, bool inverse) const;
  // The table, [count][head_dim / 2], entry (position - first_position) * head_dim / 2 + i
  // (the GPU decoder uploads it: gpu_kernels/dckv_decode.h).
  const std::vector<float>& cos_values() const { return cos_; }
  const std::vector<float>& sin_values() const { return sin_; }

 private:
  uint32_t half_ = 0, first_ = 0;
  std::vector<float> cos_, sin_;  // [count][half]
};

}  // namespace kvstash::dckv
