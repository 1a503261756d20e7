// Fuzzes the llama.cpp sequence-state parser (engines/llama_cpp/llama_state.h), the
// bytes llama_state_seq_get_data writes and kvstash rebuilds for import.
// First input byte: bit 0 = v_trans (flash attention off), bit 1 = bf16 (else f16),
// bit 2 = interleaved-RoPE K (Llama family), so one corpus covers the eight layouts of a
// 2-layer, 2-KV-head, head_dim 4 model; the rest
// is the state. Any input must give a Status or a state, never a crash, an out-of-bounds
// access or an unbounded allocation; an accepted state must write back to exactly the
// same bytes (the parser/writer round trip is bit-exact).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "engines/llama_cpp/llama_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvstash;
  if (size < 1) return 0;
  llama_cpp::StateLayout layout;
  layout.kv = {2, 2, 4, (data[0] & 2) ? DType::kBF16 : DType::kF16};
  layout.v_trans = (data[0] & 1) != 0;
  layout.k_rope_interleaved = (data[0] & 4) != 0;
  const std::span<const uint8_t> state(data + 1, size - 1);
  auto parsed = llama_cpp::ParseSeqState(state, layout);
  if (!parsed.ok()) return 0;
  auto written = llama_cpp::WriteSeqState(layout, parsed->seq_id, std::span(&parsed->kv, 1));
  if (!written.ok() || written->size() != state.size() ||
      !std::equal(written->begin(), written->end(), state.begin())) {
    std::abort();  // an accepted state must round-trip bit-exactly
  }
  return 0;
}
