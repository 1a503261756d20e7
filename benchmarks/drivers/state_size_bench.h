// The recurrent-state bench (`kvstash-bench state`): how large the recurrent state of a real trained RWKV-7
// is, and how far model-free lossless coders shrink it, on real text.
//
// Runs the RWKV-7 reference runtime (model/rwkv7) over the bytes of a text file, one
// byte per token from the zero state, and at each requested boundary exports the state
// (model/rwkv7/rwkv7_state.h), checks that it round-trips exactly through a stored
// state record and back into the runtime, and measures each part (att_shift,
// ffn_shift, wkv_state, all) with model/rwkv7/state_size.h: raw bytes, zstd, zstd
// after byte-plane shuffle, and the order-0 byte-plane entropy (ideal byte-plane
// coder). Also reports the model's bits per byte on the text, so that a broken model
// shows.
//
// Errors: IOError for a model or text file that cannot be read; InvalidArgument for a
// boundary list that cannot be used;
// Internal when a state does not round-trip exactly.
// Thread-safety: one run at a time.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/default_paths.h"
#include "kvstash/result.h"

namespace kvstash::bench {

struct StateBenchOptions {
  std::string model = DefaultRwkv7ModelPath();              // rwkv.cpp RWKV-7 file
  std::string text = "/usr/share/common-licenses/GPL-3";    // fed byte by byte
  std::string boundaries = "16,64,256,1024,4096,16384,end";  // token counts; end = text
  int zstd_level = 19;
};

struct StateBenchResult {
  // bench, model, model_fingerprint, text, text_bytes, zstd_level, bits_per_byte,
  // tokens_per_second, rows (one per boundary and part: boundary_tokens, part, tensors,
  // scalars, raw_bytes, zstd_bytes, zstd_shuffled_bytes, byteplane_entropy_bytes, the
  // three ratios vs raw and bits per scalar).
  nlohmann::json summary;
  size_t predicted_bytes = 0;  // bytes the bits_per_byte figure averages over
};

// `on_row` (may be empty) sees each row as it is measured.
Result<StateBenchResult> RunStateBench(const StateBenchOptions& options,
                                       const std::function<void(const nlohmann::json& row)>& on_row = {});

}  // namespace kvstash::bench
