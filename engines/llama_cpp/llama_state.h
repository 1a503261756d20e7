// llama.cpp sequence-state bytes <-> kvstash's canonical KV chunk.
//
// llama_state_seq_get_data(ctx, ..., seq_id) writes the KV cache of one sequence as the
// byte layout below (llama.cpp, vendored in llama-cpp-python 0.3.36: llama-context.cpp
// state_seq_get_data, llama-kv-cache.cpp state_write / state_write_meta /
// state_write_data); llama_state_seq_set_data reads the same layout back. This file
// parses those bytes field by field into one canonical KvChunk (kvstash/kv_chunk.h: per
// layer K [T, n_kv_heads, head_dim] then V [T, n_kv_heads, head_dim]) and writes them
// back, bit-exactly: WriteSeqState(ParseSeqState(b)) == b for every b it accepts.
// It has no dependency on libllama (the constants below are llama.cpp's / ggml's), so
// the parser builds, is tested and is fuzzed without llama.cpp installed.
//
// Layout (every integer in host byte order; kvstash runs on little-endian hosts only):
//   u32 magic = 0xaf143cd8       i32 seq_id           u32 n_stream (must be 1)
//   u32 cell_count (T)           T cell records:  i32 pos, u32 n_seq_id, i32 seq_id[n_seq_id]
//   u32 v_trans                  u32 n_layer
//   n_layer x { i32 k_type, u64 k_row_bytes, T x k_row_bytes }            K rows, cell order
//   v_trans == 0: n_layer x { i32 v_type, u64 v_row_bytes, T x v_row_bytes }
//   v_trans == 1: n_layer x { i32 v_type, u32 v_elem_bytes, u32 n_embd_v_gqa,
//                             n_embd_v_gqa x (T x v_elem_bytes) }          V transposed
// A K or V row of one cell is n_kv_heads x head_dim elements, head-major, which is one
// token's [n_kv_heads, head_dim] slice of the canonical layout (for Llama-family models
// after a per-head channel permutation of K, StateLayout::k_rope_interleaved). v_trans
// is 1 when the context runs without flash attention, 0 with it.
//
// READ ME FIRST
// - What is accepted: exactly the state of ONE sequence of a standard (non-SWA,
//   non-recurrent, non-M-RoPE) attention KV cache whose layout equals `expected`: one
//   stream, every cell owned by that one sequence only (n_seq_id 1, seq_id equal to the
//   header's), positions 0, 1, ..., T-1 in cell order (a prefix of a fresh or cleared
//   sequence), T >= 1, the expected v_trans, layer count, ggml types (f16 = 1 or
//   bf16 = 30, the same for K and V) and row sizes, and no byte after the last V row.
//   Anything else is refused; nothing is half-parsed.
// - Cell extension records (llama_kv_cell_ext: M-RoPE 2D positions, per-layer-embedding
//   token ids) are not part of the accepted layout: a model that writes them (its
//   llama_model_rope_type is M-RoPE/vision) is refused where the layout is derived from
//   the model (engines/llama_cpp/llama_session.h), before any state is read.
// - The parser checks structure, not data: a state from the same layout with different
//   K/V bytes (a flipped data bit) parses, and the chunk it yields has a different
//   content checksum. Guarding data is the stored payload's job (its header carries
//   the decoded chunk's checksum, verified by every decoder before any import).
// - Two different models with the same KV layout write states this parser cannot tell
//   apart; the namespace (model fingerprint) is what keeps their chains apart.
//
// Errors: Corruption for bytes that are not a well-formed state (bad magic, truncation,
// trailing bytes, inconsistent cell records, a count that does not fit the bytes);
// Mismatch for a well-formed state of another layout (layer count, K/V type, row size,
// v_trans i.e. the flash-attention setting); NotSupported for several streams or
// sequences, shared cells, or positions that are not 0..T-1; InvalidArgument for a bad
// `expected` layout or chunks that do not fit it.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstash/kv_chunk.h"
#include "kvstash/result.h"

namespace kvstash::llama_cpp {

// The magic llama.cpp writes before every sequence state (llama-context.cpp io_magic).
inline constexpr uint32_t kSeqStateMagic = 0xaf143cd8u;
// ggml_type values (ggml.h) of the KV element types kvstash stores.
inline constexpr int32_t kGgmlTypeF16 = 1;
inline constexpr int32_t kGgmlTypeBf16 = 30;

// The ggml type id of a kvstash dtype (f16 -> 1, bf16 -> 30). InvalidArgument otherwise.
Result<int32_t> GgmlTypeOf(DType dtype);

// What a state must look like to be accepted: the model's KV shape and dtype and the
// context's V transposition.
struct StateLayout {
  // n_layers (every layer has K and V), n_kv_heads, head_dim, dtype kF16 or kBF16
  // (llama.cpp's type_k == type_v). Default: invalid (set it).
  KvLayout kv;
  // true when the context runs without flash attention (llama.cpp then stores V
  // transposed). Default: true.
  bool v_trans = true;
  // true when llama.cpp's K channels are in the interleaved-RoPE order: models with
  // LLAMA_ROPE_TYPE_NORM (the Llama family), whose GGUF q/k weights the converter
  // permuted so that rotating adjacent pairs (2i, 2i+1) equals Hugging Face's
  // rotate_half on (i, i + head_dim/2). The canonical chunk holds K in the Hugging Face
  // order (that of our runtime and of vLLM), so the parser maps channel 2i+j of each
  // head to j*head_dim/2 + i and the writer maps it back (a permutation: the round trip
  // stays bit-exact). V is never permuted. Default: false.
  bool k_rope_interleaved = false;

  // InvalidArgument unless kv is valid with dtype f16 or bf16.
  Status Validate() const;
  // InvalidArgument also for k_rope_interleaved with an odd head_dim.
  // Bytes of one K (or V) row of one cell: n_kv_heads * head_dim * 2.
  uint64_t RowBytes() const;
  // Exact size of the state of a `tokens`-token sequence with this layout.
  uint64_t StateBytes(uint64_t tokens) const;
  bool operator==(const StateLayout&) const = default;
};

// A parsed sequence state.
struct SeqState {
  int32_t seq_id = 0;  // the sequence id the state was saved from (llama.cpp ignores it
                       // on import: the caller names the destination sequence)
  KvChunk kv;          // all T cells as one canonical chunk, tokens = T, layout expected.kv
};

// Parses `bytes` (a whole llama_state_seq_get_data output). Errors: see the file comment.
Result<SeqState> ParseSeqState(std::span<const uint8_t> bytes, const StateLayout& expected);

// Writes the state of a `seq_id` sequence holding positions 0..T-1 whose KV is `chunks`
// concatenated in order (T = sum of their tokens), in `layout`. The result is what
// llama_state_seq_set_data imports. Errors: InvalidArgument for a bad layout, no chunks,
// a chunk that fails Validate() or whose KvLayout is not layout.kv, or T above
// kMaxChunkTokens.
Result<std::vector<uint8_t>> WriteSeqState(const StateLayout& layout, int32_t seq_id,
                                           std::span<const KvChunk> chunks);

}  // namespace kvstash::llama_cpp
