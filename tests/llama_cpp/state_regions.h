// Which bytes of a llama.cpp sequence state are K/V data (tests only): derived from the
// layout in llama-kv-cache.cpp state_write_data independently of the parser.
#pragma once

#include <cstdint>
#include <vector>

#include "engines/llama_cpp/llama_state.h"

namespace kvstash::llama_cpp::state_regions {

// mask[i] is true when byte i of a `tokens`-token state of `layout` is K or V data.
inline std::vector<bool> DataByteMask(const StateLayout& layout, uint32_t tokens) {
  std::vector<bool> mask;
  auto structure = [&](size_t n) { mask.insert(mask.end(), n, false); };
  auto data = [&](size_t n) { mask.insert(mask.end(), n, true); };
  const size_t row = size_t{layout.kv.n_kv_heads} * layout.kv.head_dim * 2;
  structure(16 + 12 * size_t{tokens} + 8);  // header, cell records, v_trans, n_layer
  for (uint32_t l = 0; l < layout.kv.n_layers; ++l) {
    structure(4 + 8);  // K type, row size
    data(tokens * row);
  }
  for (uint32_t l = 0; l < layout.kv.n_layers; ++l) {
    structure(layout.v_trans ? 4 + 4 + 4 : 4 + 8);  // V type, (element size, width | row size)
    data(tokens * row);
  }
  return mask;
}

}  // namespace kvstash::llama_cpp::state_regions
