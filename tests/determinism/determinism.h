// The determinism manifest (issue 21, docs/determinism.md): named 64-bit digests of
// everything a decoder must reproduce bit for bit on any CPU, compiler, flag set,
// SIMD path, thread count or batch split, computed from real inputs:
//
//   predictor.<variant>.weights          SpecPredictor::Digest() of SmolLM2-135M Q4_1
//   predictor.<variant>.<prompt>.kv      PredictorCacheDigest() of the prompt's K/V
//   spec.artifact.file                   XXH3-64 of fixtures/spec.kvsa (calibrated once)
//   spec.artifact.tables                 XXH3-64 of the rANS tables the decoder builds
//                                        from that artifact (TableSet decode/encode entries)
//   spec.<prompt>.decoded                KvChunk::ContentChecksum() of the committed
//                                        payload fixtures/spec-<prompt>.kvsp decoded with
//                                        this build's predictor
//   spec.<prompt>.reencoded              XXH3-64 of that chunk encoded again (the
//                                        encoder's bytes)
//   rwkv7.predictor.int8-g32.state@<n>   RecurrentState::ContentChecksum() of the RWKV-7
//                                        predictor's state after n bytes of text
//   rwkv7.spec-state.artifact.tables     as spec.artifact.tables, for fixtures/rwkv7.kvss
//   rwkv7.spec-state@<n>.decoded         checksum of fixtures/rwkv7-state-<n>.kvsc decoded
//   rwkv7.spec-state@<n>.reencoded       XXH3-64 of the state encoded again
//   dckv.hand.artifact                   XXH3-64 of the hand-built dckv artifact
//                                        (tests/codec/dckv/dckv_hand_artifact.h: fixed integer
//                                        formulas, no calibration: the same bytes anywhere)
//   dckv.hand.decoded                    KvChunk::ContentChecksum() of the committed
//                                        payload fixtures/dckv-hand.kvdp (40 rows) decoded:
//                                        rANS, dequantisation and synthesis (scalar/AVX2)
//   dckv.hand.encoded                    XXH3-64 of this build's encoding of the same rows
//                                        (the artifact's quantised rows, fixed formula,
//                                        reconstructed): the fixture's bytes
//
// A value is "0x" + 16 hex digits, or "error: <status>" when the item could not be
// computed (a decode that returns Mismatch, a fixture that does not parse): such a
// value never equals a manifest digest, so the comparison names the item.
//
// Prompts: the first two 64-token documents of model/corpus's EVALUATION split; the
// spec payloads code tokens [56, 64) of each (a 56-token prefix). RWKV-7: the first
// 512 bytes of the first evaluation file, states at 256 and 512.
//
// Thread-safety: functions are reentrant; the models are read only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvstash/result.h"
#include "kvstash/status.h"
#include "model/forward/model.h"
#include "model/rwkv7/rwkv7_model.h"

namespace kvstash::determinism {

// name -> "0x0123456789abcdef" (or "error: ...").
using Digests = std::map<std::string, std::string>;

// Items computed by the CUDA paths are named kCudaPrefix + the manifest item they must
// equal (determinism_cuda.h).
inline constexpr char kCudaPrefix[] = "cuda:";

struct Inputs {
  const model::Model* smollm = nullptr;      // SmolLM2-135M-Instruct Q4_1 (REQUIRED)
  const rwkv7::Rwkv7Model* rwkv7 = nullptr;  // tiny RWKV-7; null: rwkv7.* items absent
  std::string fixtures_dir;                  // tests/determinism/fixtures
  // Threads of the predictors and the spec coders. Default: 1.
  int threads = 1;
  // Batch split points of every predictor run (tokens [0, s0), [s0, s1), ...). The
  // digests must not depend on them. Default: none (one batch).
  std::vector<uint32_t> splits;
  // When set, the re-encoded payloads and states are written there under the fixture
  // names (spec-<prompt>.kvsp, rwkv7-state-<n>.kvsc), so that another platform can
  // decode what this one encoded (scripts/determinism_aarch64.sh). Default: "" (none).
  std::string emit_dir;
  // Only the first `prompts` evaluation prompts (their predictor.*.evalN.kv and
  // spec.evalN.* items); the others are not computed. For emulated runs
  // (qemu-user), where each prompt costs minutes. Default: all (2).
  size_t prompts = SIZE_MAX;
};

// Whether `item` belongs to an evaluation prompt at or past `prompts` (the items
// Inputs::prompts leaves out): its name has ".evalN." with N >= prompts.
bool OutsidePrompts(const std::string& item, size_t prompts);

// Computes every item (reads the fixtures). Errors: only for missing prompts or an
// unusable model; a per-item failure becomes that item's "error: ..." value.
Result<Digests> ComputeDigests(const Inputs& in);

// Regenerates the fixtures (spec artifact calibrated on the CALIBRATION split with the
// fp32 forward pass; payloads of the true KV; the RWKV-7 state artifact and coded
// states) into in.fixtures_dir. Only legitimate when a format version changes or a
// new item is added: the old payloads would no longer decode (docs/determinism.md).
Status WriteFixtures(const Inputs& in);

// Names whose values differ, or that one side lacks, sorted.
std::vector<std::string> CompareDigests(const Digests& manifest, const Digests& got);

// The manifest file: {"format": 1, "items": {name: value, ...}}.
// Errors: IOError (unreadable), Corruption (not such a JSON object).
Result<Digests> ReadManifest(const std::string& path);
Status WriteManifest(const std::string& path, const Digests& digests);

}  // namespace kvstash::determinism
