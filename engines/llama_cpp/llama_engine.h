// Thin, checked helpers over llama.cpp's public C API (llama.h of llama-cpp-python
// 0.3.36) that the engine session and its tests share: owning handles, the state
// layout a (model, context parameters) pair writes, prompt evaluation, and sequence
// state export/import.
//
// READ ME FIRST
// - llama.cpp reports failures as return codes and log lines; every helper here turns
//   them into a Status. None aborts on bad input (a failed decode or import is a Status).
// - A llama_context is not thread-safe: one thread at a time may call these helpers on
//   one context. Distinct contexts (even of one model) may run concurrently.
// - StateLayoutOf needs the context PARAMETERS, not the context: llama.cpp does not
//   report a context's resolved K/V types or flash-attention setting, so
//   flash_attn_type must be ENABLED or DISABLED (AUTO is refused: its choice is not
//   observable, and it decides whether V is stored transposed).
#pragma once

#include <llama.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engines/llama_cpp/llama_state.h"
#include "kvstash/result.h"

namespace kvstash::llama_cpp {

struct ModelDeleter {
  void operator()(llama_model* m) const { llama_model_free(m); }
};
struct ContextDeleter {
  void operator()(llama_context* c) const { llama_free(c); }
};
using ModelPtr = std::unique_ptr<llama_model, ModelDeleter>;
using ContextPtr = std::unique_ptr<llama_context, ContextDeleter>;

// llama_backend_init once per process (thread-safe), and llama.cpp's log lines below
// `min_level` dropped (GGML_LOG_LEVEL_WARN keeps warnings and errors).
void InitLlamaBackend(ggml_log_level min_level = GGML_LOG_LEVEL_WARN);

// Loads a GGUF on the CPU (n_gpu_layers 0). Errors: NotFound for a missing file,
// InvalidArgument when llama.cpp cannot load it.
Result<ModelPtr> LoadModel(const std::string& gguf_path);

// Context parameters kvstash uses: n_ctx tokens, n_threads (prompt and generation),
// explicit flash attention, K and V of `kv_dtype` (kF16 = llama.cpp's default, kBF16),
// one sequence, n_batch = n_ubatch = n_ctx. Errors: InvalidArgument for a dtype other
// than f16/bf16 or n_ctx 0.
Result<llama_context_params> ContextParams(uint32_t n_ctx, int n_threads, bool flash_attn,
                                           DType kv_dtype);
// Errors: InvalidArgument when llama.cpp refuses the parameters.
Result<ContextPtr> NewContext(llama_model* model, const llama_context_params& params);

// The layout of the sequence states a context of `model` made with `params` writes
// (k_rope_interleaved for LLAMA_ROPE_TYPE_NORM models).
// Errors: NotSupported for recurrent/hybrid models, sliding-window attention, M-RoPE or
// vision RoPE (cell extension records), K/V head sizes that differ, flash_attn_type AUTO,
// type_k != type_v or a type other than f16/bf16.
Result<StateLayout> StateLayoutOf(const llama_model* model, const llama_context_params& params);

// Tokenizes `text` with the model's vocabulary (no BOS/EOS added, special tokens
// parsed). Errors: InvalidArgument when llama.cpp fails.
Result<std::vector<llama_token>> Tokenize(const llama_model* model, const std::string& text);

// Evaluates tokens at positions pos0, pos0+1, ... of sequence `seq` in batches of at
// most llama_n_batch(ctx) tokens and returns the logits of the last token
// (llama_vocab_n_tokens floats). REQUIRES: the sequence holds exactly positions
// [0, pos0). Errors: InvalidArgument for no tokens; Unavailable when llama_decode fails
// (no KV slot: the context is too small, or a compute failure).
Result<std::vector<float>> Evaluate(llama_context* ctx, std::span<const llama_token> tokens,
                                    llama_pos pos0, llama_seq_id seq = 0);

// llama_state_seq_get_data of sequence `seq`. Errors: Internal when llama.cpp writes
// nothing or not the size it announced.
Result<std::vector<uint8_t>> ExportSeqState(llama_context* ctx, llama_seq_id seq = 0);

// Clears sequence `seq`, then llama_state_seq_set_data of `state` into it, then checks
// that the sequence holds exactly positions [0, expect_tokens). On any failure the
// sequence is cleared again (never a partial import). Errors: Corruption when llama.cpp
// refuses the bytes or reads fewer than all of them, Internal when the imported
// positions are not [0, expect_tokens).
Status ImportSeqState(llama_context* ctx, std::span<const uint8_t> state, uint32_t expect_tokens,
                      llama_seq_id seq = 0);

}  // namespace kvstash::llama_cpp
