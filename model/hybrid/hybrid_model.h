// Qwen3.5-style hybrid model (Gated DeltaNet + gated full attention): an fp32 CPU
// reference runtime for Hugging Face checkpoints (config.json + model.safetensors),
// computing what transformers' Qwen3_5ForCausalLM computes (modeling_qwen3_5.py,
// transformers 5.24.0); equations in docs/models/hybrid.md.
//
// Per token t at position p (D = hidden_size, all fp32):
//   x = embed_tokens[t]
//   per layer: x += Mixer(RMSNorm(x)); x += MLP(RMSNorm(x))       (zero-centred norms)
//   logits = lm_head . RMSNorm(x)
// Mixer of a "linear_attention" layer (Gated DeltaNet, Yang et al. 2024):
//   qkv = in_proj_qkv x, z = in_proj_z x, b = in_proj_b x, a = in_proj_a x
//   qkv = silu(depthwise causal conv1d over the last conv_kernel qkv inputs)
//   q, k = l2norm per key head (eps 1e-6), q /= sqrt(head_k_dim); value head h reads
//   key head h / (num_v_heads / num_k_heads)
//   beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias)
//   S = exp(g) S;  S += k (beta (v - S^T k))^T;  o = S^T q            (per value head)
//   out_proj(RMSNormGated(o, z))
// Mixer of a "full_attention" layer: q|gate = q_proj x (per head), q_norm / k_norm
// (zero-centred, per head), partial RoPE on the first rotary_dim channels, causal
// GQA softmax attention scaled by head_dim^-0.5, output * sigmoid(gate), o_proj.
// MLP: down_proj(silu(gate_proj x) * up_proj x).
//
// READ ME FIRST
// - Tokens are processed one at a time with the recurrent form of the delta rule
//   (transformers' torch_recurrent_gated_delta_rule). transformers' prefill uses the
//   chunked form (torch_chunk_gated_delta_rule): equal in exact arithmetic, different
//   fp32 rounding; tests/model/hybrid checks the difference against committed goldens.
// - Because every token's arithmetic is the same whatever came before it in the same
//   call, Eval over a sequence split anywhere, with the state exported and imported in
//   between (model/hybrid/hybrid_state.h), gives bit-identical logits.
// - Loading validates every tensor's name and shape; unknown tensors are Corruption,
//   except the multi-token-prediction head ("mtp.*") and the vision tower
//   ("model.visual.*") of full Qwen3.5 checkpoints, which are ignored.
//
// Thread-safety: a loaded model is immutable; const methods may run concurrently on
// distinct states.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kvstash/prefix_key.h"
#include "kvstash/result.h"
#include "model/hybrid/hybrid_config.h"
#include "model/hybrid/hybrid_state.h"

namespace kvstash::hybrid {

class HybridModel {
 public:
  // Loads `dir`/config.json and `dir`/model.safetensors (one shard).
  // Errors: IOError for an unreadable file; ParseHybridConfig's; Corruption for a
  // malformed safetensors file or a missing, misshapen or unexpected tensor;
  // NotSupported for a tensor dtype other than F32/F16/BF16.
  static Result<HybridModel> Load(const std::string& dir);
  // Same with explicit paths.
  static Result<HybridModel> LoadFiles(const std::string& config_path,
                                       const std::string& safetensors_path);

  HybridModel(HybridModel&&) noexcept;
  HybridModel& operator=(HybridModel&&) noexcept;
  ~HybridModel();

  const HybridConfig& config() const { return config_; }
  // SHA-256 of config.json's bytes followed by model.safetensors' bytes: the model
  // fingerprint of stored KV payloads and state records.
  const Digest256& fingerprint() const { return fingerprint_; }

  // Consumes one token at position state->tokens: advances the state (appends K/V,
  // updates conv and delta states) and, when `logits` is non-empty, writes the
  // vocab_size next-token logits (an empty span skips the final norm and head).
  // Errors: InvalidArgument for token >= vocab_size, a state of the wrong shape, or a
  // logits span that is neither empty nor vocab_size long; the state is unchanged then.
  Status Eval(uint32_t token, HybridState* state, std::span<float> logits) const;

  // Eval over each token in order. `logits` is empty, vocab_size long (logits after
  // the last token) or tokens.size() * vocab_size long (logits after every token, row
  // i after tokens[i]). Errors: Eval's, checked before the state is touched.
  Status EvalSequence(std::span<const uint32_t> tokens, HybridState* state,
                      std::span<float> logits) const;

 private:
  friend class HybridPredictor;  // quantises the weights (hybrid_predictor.h)
  struct Weights;
  HybridModel(HybridConfig config, Digest256 fingerprint, std::unique_ptr<Weights> weights);
  void Forward(uint32_t token, HybridState* state, std::span<float> logits) const;

  HybridConfig config_;
  Digest256 fingerprint_{};
  std::unique_ptr<Weights> weights_;
};

}  // namespace kvstash::hybrid
