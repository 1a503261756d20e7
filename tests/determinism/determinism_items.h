// What the CPU (determinism.cc) and the CUDA (determinism_cuda.cc) sides of the
// determinism manifest share: the prompts, the spec chunk they code, the dckv chunk,
// the value formats and the batch-split runner. Internal to tests/determinism/.
// Thread-safety: reentrant.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"
#include "model/forward/model.h"
#include "tests/determinism/determinism.h"

namespace kvstash::determinism {

inline constexpr uint32_t kPromptTokens = 64;  // tokens per prompt
inline constexpr uint32_t kPrompts = 2;        // evaluation documents used
inline constexpr uint32_t kChunkBegin = 56;    // spec payloads code [kChunkBegin, kPromptTokens)
inline constexpr uint32_t kDckvTokens = 40;    // dckv: the hand artifact's chunk of 40 rows
inline constexpr uint32_t kDckvOffset = 5;     //   at positions [5, 45)

// "0x" + 16 lower-case hex digits.
std::string Hex(uint64_t v);
// "error: " + the status.
std::string Error(const Status& s);
// The bf16 KV layout of a model's attention layers.
KvLayout Layout(const model::ModelConfig& c);
// The first kPrompts evaluation documents of exactly kPromptTokens tokens.
// Errors: NotFound when the corpus has fewer.
Result<std::vector<std::vector<uint32_t>>> Prompts(const model::Model& m);
// "eval<i>".
std::string PromptName(size_t i);
// in.fixtures_dir + "/" + name.
std::string Fixture(const Inputs& in, const std::string& name);

// Runs `predictor` (SpecPredictor or SpecPredictorCuda: Run(tokens, cache)) over
// `tokens` in the batches [0, s0), [s0, s1), ... of the split points inside the span.
template <typename Predictor, typename Cache>
Status RunSplit(const Predictor& predictor, std::span<const uint32_t> tokens, const std::vector<uint32_t>& splits,
                Cache* cache) {
  size_t at = 0;
  std::vector<uint32_t> ends;
  for (uint32_t s : splits) {
    if (s > at && s < tokens.size()) ends.push_back(s);
  }
  ends.push_back(static_cast<uint32_t>(tokens.size()));
  for (uint32_t e : ends) {
    KVSTASH_RETURN_IF_ERROR(predictor.Run(tokens.subspan(at, e - at), cache));
    at = e;
  }
  return Status::Ok();
}

}  // namespace kvstash::determinism
