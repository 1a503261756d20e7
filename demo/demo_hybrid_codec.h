// The codecs of `kvstash-demo --model-kind hybrid`: how a chunk of a hybrid model's
// attention KV and a recurrent-state record are coded (HybridKvCoder: raw, spec, dckv;
// demo_hybrid_raw.cc, demo_hybrid_spec.cc, demo_hybrid_dckv.cc) and the engine
// session's codec over one (MakeHybridChunkCodec: session::ChunkCodec, chunk_codec.h).
//
// READ ME FIRST
// - Chunks are the hybrid's canonical f32 KV (hybrid::HybridKvLayout); a chain of
//   `chunk_tokens`-token chunks (the last one partial) in a namespace of the model, the
//   coder, the cache salt and the tenant.
// - A state record rides on every `state_every`-th chunk and on the chain's last one
//   (the prefix end); LOOKUPs require one.
// - Payloads are bound to their keys (BindPayloadToKey) and checked on restore
//   (CheckPayloadKey) before the coder decodes them.
// Thread-safety: see each coder; the session encodes on its PUT thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/dckv/dckv_codec.h"
#include "codec/spec/spec_state_artifact.h"
#include "engines/session/chunk_codec.h"
#include "kvstash/kv_chunk.h"
#include "model/hybrid/hybrid_model.h"
#include "model/hybrid/hybrid_predictor.h"
#include "model/hybrid/hybrid_state.h"

namespace kvstash::demo {

// How the hybrid demo codes a chunk of attention KV and a state record. The raw coder
// stores both byte-exact (codec raw payloads of f32 KV, EncodeStateRecord).
class HybridKvCoder {
 public:
  virtual ~HybridKvCoder() = default;
  virtual std::string name() const = 0;
  // The namespace's codec id and artifact digest (part of every chunk key).
  virtual std::string codec_id() const = 0;
  virtual std::string artifact_digest() const { return ""; }
  // Lossy KV (dckv): hits are checked for an exact state and measured for quality
  // (top-1 agreement, KL) instead of exact KV and logits.
  virtual bool lossy() const { return false; }
  // Payload of `exact`, the exact KV of tokens [begin, begin + exact.tokens) of
  // `prefix`. `partial`: the chain's short last chunk.
  virtual Result<std::vector<uint8_t>> EncodeChunk(std::span<const uint32_t> prefix, const KvChunk& exact,
                                                   uint32_t begin, bool partial) const = 0;
  // The state record of `recurrent` (the exact state at its boundary_tokens).
  virtual Result<std::vector<uint8_t>> EncodeState(std::span<const uint32_t> prefix,
                                                   const RecurrentState& recurrent) const = 0;
  // The state at the boundary the payloads reach: decodes and checks every payload
  // and the record. Any failure is an error (the caller's miss).
  virtual Result<hybrid::HybridState> Restore(std::span<const uint32_t> prefix,
                                              std::span<const std::vector<uint8_t>> payloads,
                                              std::span<const uint8_t> state_record,
                                              double* predictor_ms) const = 0;
};

// Stores KV as codec-raw f32 payloads and states as raw records
// (model/hybrid/hybrid_stored.h).
std::unique_ptr<HybridKvCoder> MakeRawHybridCoder(const hybrid::HybridModel& model);

// Codes KV and states against the int8 predictor (model/hybrid/hybrid_spec.h); the
// encoder keeps the predictor's state over the last prefix it saw, so encode a
// prefix's chunks and states in order. Not thread-safe (that cache).
std::unique_ptr<HybridKvCoder> MakeSpecHybridCoder(const hybrid::HybridModel& model,
                                                   std::shared_ptr<const hybrid::HybridPredictor> predictor,
                                                   std::shared_ptr<const spec::SpecStateArtifact> artifact);

// Lossy-codes the KV with dckv (decoded to bf16, widened to fp32) and stores the
// state exact (raw records).
std::unique_ptr<HybridKvCoder> MakeDckvHybridCoder(const hybrid::HybridModel& model,
                                                   std::shared_ptr<const dckv::DckvCodec> codec);

// A dckv artifact for the hybrid's attention layers (one layer group each; no token
// conditioning; raw head 4, raw tail 128 positions) from the exact K (un-rotated with
// the codec's own RoPE) and V of `sequences` run from the empty state.
// Errors: model and dckv calibration errors.
Result<dckv::DckvArtifact> CalibrateHybridDckv(const hybrid::HybridModel& model,
                                               std::span<const std::vector<uint32_t>> sequences,
                                               double target_ratio);

// Where the chain of a hybrid codec lives.
struct HybridChainOptions {
  uint32_t chunk_tokens = 256;  // tokens per stored chunk (1..kMaxChunkTokens)
  uint32_t state_every = 2;     // a state record every this many chunks (+ the chain's end)
  std::string cache_salt;       // separates this run's keys from earlier runs'
  std::string tenant;
};

// The engine session's codec over `coder` for `model` (stores_state()).
// Errors: InvalidArgument for chunk_tokens 0 or above kMaxChunkTokens; NamespaceDigest's.
Result<std::shared_ptr<const session::ChunkCodec>> MakeHybridChunkCodec(const hybrid::HybridModel& model,
                                                                        std::unique_ptr<HybridKvCoder> coder,
                                                                        const HybridChainOptions& options);

}  // namespace kvstash::demo
