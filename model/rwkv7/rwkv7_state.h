// The recurrent state of an RWKV-7 model and its exact export to / import from the
// named-tensor form kvstash stores (kvstash/kv_chunk.h RecurrentState).
//
// Per layer l the state is (fp32):
//   layers.<l>.att_shift  [C]        layer-normed input of the time mix at the last
//                                    token (token shift of the time mix)
//   layers.<l>.ffn_shift  [C]        layer-normed input of the channel mix at the last
//                                    token (token shift of the channel mix)
//   layers.<l>.wkv_state  [H, N, N]  WKV matrix per head, S[h][i][j]: i = value
//                                    channel, j = key channel (S += v k^T per token)
// Exported in that order, layer by layer; RecurrentState::boundary_tokens is the
// number of tokens the state has consumed. Export and import copy the fp32 bit
// patterns, so continuing from an imported state is bit-identical to never stopping.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"
#include "model/rwkv7/rwkv7_config.h"

namespace kvstash::rwkv7 {

struct Rwkv7LayerState {
  std::vector<float> att_shift;  // [C]
  std::vector<float> ffn_shift;  // [C]
  std::vector<float> wkv;        // [H * N * N], S[h][i][j] at (h * N + i) * N + j
  bool operator==(const Rwkv7LayerState&) const = default;
};

struct Rwkv7State {
  uint32_t tokens = 0;  // tokens consumed since the zero state
  std::vector<Rwkv7LayerState> layers;

  // The initial state (all zeros), as rwkv.cpp's rwkv_init_state gives for RWKV-7.
  static Rwkv7State Zeros(const Rwkv7Config& config);
  // InvalidArgument unless the layer count and every vector size match `config`.
  Status CheckShape(const Rwkv7Config& config) const;
  // Exact equality of the bit patterns (distinguishes -0.0 from 0.0, compares NaNs).
  bool BitEqual(const Rwkv7State& other) const;
};

// Tensor names of layer l's state: "layers.<l>.att_shift", ".ffn_shift", ".wkv_state".
std::string AttShiftName(uint32_t layer);
std::string FfnShiftName(uint32_t layer);
std::string WkvStateName(uint32_t layer);

// The state as named fp32 tensors (layout above).
// Errors: InvalidArgument if state.CheckShape(config) fails.
Result<RecurrentState> ExportState(const Rwkv7Config& config, const Rwkv7State& state);

// The inverse of ExportState. The tensors may come in any order but must be exactly
// the 3 * n_layer names above, dtype f32, with the documented shapes.
// Errors: InvalidArgument for a missing, extra, duplicate or misshapen tensor, a wrong
// dtype or a data size that disagrees with the shape.
Result<Rwkv7State> ImportState(const Rwkv7Config& config, const RecurrentState& state);

}  // namespace kvstash::rwkv7
