// RWKV-7 "Goose" (architecture x070): fp32 CPU reference runtime for rwkv.cpp model
// files (model/rwkv7/rwkv_file.h). Single-threaded, one token at a time; meant for
// small real models (the 834K-parameter tiny-rwkv-7v0 that rwkv.cpp tests with) and
// for measuring recurrent-state statistics, not for serving.
//
// Per token (C channels, H heads of N, all fp32; equations and sources in
// docs/models/rwkv7.md, operation order in model/rwkv7/rwkv7_ops.h):
//   x = LayerNorm(emb[token], ln0)
//   per layer: x += TimeMix(LayerNorm(x, ln1)); x += ChannelMix(LayerNorm(x, ln2))
//   logits = head . LayerNorm(x, ln_out)
// TimeMix: token shift against the previous token's input, the r/k/v projections, the
// w (decay), a (in-context learning rate), g (gate) and v-first LoRAs, the WKV
// generalised delta rule per head, per-head GroupNorm, the r.k bonus, output proj.
// ChannelMix: token shift, squared ReLU MLP.
//
// READ ME FIRST
// - Layer 0's value v becomes "v first" and every later layer mixes its own value
//   towards it with a learned sigmoid gate. It is per token, not part of the state.
// - LayerNorm eps is 1e-5, the per-head GroupNorm eps 64e-5 (RWKV-LM's ln_x), the L2
//   normalisation of kk clamps the norm at 1e-12, and the decay is
//   w = exp(-e^-0.5 * sigmoid(w0 + w2 tanh(w1 x))).
// - Loading validates every tensor's name and shape; files of other RWKV versions
//   (v4/v5/v6, no "blocks.0.att.x_rwkvag") are NotSupported.
//
// Thread-safety: a loaded model is immutable; const methods may run concurrently on
// distinct states.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvstash/prefix_key.h"
#include "kvstash/result.h"
#include "model/rwkv7/rwkv7_config.h"
#include "model/rwkv7/rwkv7_state.h"

namespace kvstash::rwkv7 {

class Rwkv7Model {
 public:
  // Parses and validates a model file image (model/rwkv7/rwkv_file.h).
  // Errors: ParseRwkvFile's; Corruption for a missing, unexpected or misshapen tensor
  // or a header that disagrees with the tensors; NotSupported for a file that is not
  // RWKV-7 or holds quantised tensors.
  static Result<Rwkv7Model> FromBytes(std::span<const uint8_t> bytes);
  // Reads `path` and calls FromBytes. Errors: IOError, then FromBytes's.
  static Result<Rwkv7Model> Load(const std::string& path);

  Rwkv7Model(Rwkv7Model&&) noexcept;
  Rwkv7Model& operator=(Rwkv7Model&&) noexcept;
  ~Rwkv7Model();

  const Rwkv7Config& config() const;
  // SHA-256 of the model file bytes: the model fingerprint of stored state records.
  const Digest256& fingerprint() const;

  // Consumes one token: advances `state` and, when `logits` is non-empty, writes the
  // n_vocab next-token logits into it (an empty span skips the head).
  // Errors: InvalidArgument for token >= n_vocab, a state of the wrong shape, or a
  // logits span that is neither empty nor n_vocab long; state is unchanged then.
  Status Eval(uint32_t token, Rwkv7State* state, std::span<float> logits) const;

  // Eval over each token in order; `logits` (empty or n_vocab) receives the logits
  // after the last token. Bit-identical to calling Eval per token. Errors: Eval's,
  // checked for every token before the state is touched.
  Status EvalSequence(std::span<const uint32_t> tokens, Rwkv7State* state,
                      std::span<float> logits) const;

 private:
  friend class Rwkv7Predictor;  // builds its reduced-precision weights from ours
  struct Weights;
  Rwkv7Model(Rwkv7Config config, Digest256 fingerprint, std::unique_ptr<Weights> weights);

  Rwkv7Config config_;
  Digest256 fingerprint_{};
  std::unique_ptr<Weights> weights_;
};

}  // namespace kvstash::rwkv7
